/**
 * Resolution of the command that starts the fastcoder language server (`fastcoder-lsp`, stdio).
 *
 * Pure logic, no `vscode` import, so it is unit-tested with node:test. File-system access goes
 * through the injected `exists` predicate.
 */
import * as path from 'path';

/** The user's `fastcoder.server.*` settings, as read from the VS Code configuration. */
export interface ServerSettings {
  /** `fastcoder.server.command`: a program and its arguments, or one string split like a shell would. */
  command?: string | string[];
  /** `fastcoder.server.pythonPath`: an interpreter; the server runs as `<pythonPath> -m lsp_server`. */
  pythonPath?: string;
}

/** Everything the resolution depends on besides the settings. */
export interface ResolveEnvironment {
  /** Absolute paths of the open workspace folders, first folder first. */
  workspaceFolders: string[];
  /** `process.env.PATH` (or the platform's equivalent). */
  pathEnv?: string;
  /** `process.platform`; decides `.venv/bin` vs `.venv/Scripts` and `.exe` suffixes. */
  platform?: string;
  /** Home directory for a leading `~`. */
  homeDir?: string;
  /** Whether a file exists and is a file (injected for tests). */
  exists: (file: string) => boolean;
}

/** How the server command was found, for the log and for error messages. */
export type CommandSource = 'setting:command' | 'setting:pythonPath' | 'workspace-venv' | 'PATH';

/** A command ready for vscode-languageclient's `ServerOptions` (`{command, args}`). */
export interface ResolvedCommand {
  command: string;
  args: string[];
  source: CommandSource;
}

/** Resolution failed: `message` says what was tried and which setting fixes it. */
export interface ResolveError {
  error: string;
}

/** The console script and module names the Python package installs (see pyproject.toml). */
export const SERVER_SCRIPT = 'fastcoder-lsp';
export const SERVER_MODULE = 'lsp_server';

/**
 * Split a command line into words: whitespace separates words, single and double quotes group,
 * a backslash escapes the next character outside single quotes.
 *
 * @returns the words; an empty array for a blank string.
 * @throws Error on an unterminated quote.
 */
export function splitCommandLine(line: string): string[] {
  const words: string[] = [];
  let current = '';
  let inWord = false;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (quote) {
      if (ch === quote) {
        quote = undefined;
      } else if (ch === '\\' && quote === '"' && i + 1 < line.length) {
        current += line[++i];
      } else {
        current += ch;
      }
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      inWord = true;
    } else if (ch === '\\' && i + 1 < line.length) {
      current += line[++i];
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) {
        words.push(current);
        current = '';
        inWord = false;
      }
    } else {
      current += ch;
      inWord = true;
    }
  }
  if (quote) {
    throw new Error(`unterminated ${quote} quote in command: ${line}`);
  }
  if (inWord) {
    words.push(current);
  }
  return words;
}

/** Expand `${workspaceFolder}`, `${userHome}` and a leading `~` in one word. */
export function expandVariables(word: string, env: ResolveEnvironment): string {
  let out = word;
  const folder = env.workspaceFolders[0];
  if (folder !== undefined) {
    out = out.split('${workspaceFolder}').join(folder);
  }
  if (env.homeDir) {
    out = out.split('${userHome}').join(env.homeDir);
    if (out === '~' || out.startsWith('~/')) {
      out = env.homeDir + out.slice(1);
    }
  }
  return out;
}

/** The `.venv` locations of the console script in one folder, for the given platform. */
export function venvScriptCandidates(folder: string, platform: string | undefined): string[] {
  if (platform === 'win32') {
    return [path.win32.join(folder, '.venv', 'Scripts', `${SERVER_SCRIPT}.exe`)];
  }
  return [path.posix.join(folder, '.venv', 'bin', SERVER_SCRIPT)];
}

/** Find an executable on a PATH-style list; returns its full path or undefined. */
export function findOnPath(name: string, env: ResolveEnvironment): string | undefined {
  if (!env.pathEnv) {
    return undefined;
  }
  const win = env.platform === 'win32';
  const sep = win ? ';' : ':';
  const join = win ? path.win32.join : path.posix.join;
  const names = win ? [`${name}.exe`, `${name}.cmd`, name] : [name];
  for (const dir of env.pathEnv.split(sep)) {
    if (!dir) {
      continue;
    }
    for (const n of names) {
      const candidate = join(dir, n);
      if (env.exists(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

function fromCommandSetting(command: string | string[], env: ResolveEnvironment): ResolvedCommand | ResolveError | undefined {
  let words: string[];
  try {
    words = Array.isArray(command) ? command.filter((w) => typeof w === 'string') : splitCommandLine(command);
  } catch (e) {
    return { error: `fastcoder.server.command is invalid: ${(e as Error).message}` };
  }
  if (words.length === 0 || words[0].trim() === '') {
    return undefined;
  }
  const expanded = words.map((w) => expandVariables(w, env));
  return { command: expanded[0], args: expanded.slice(1), source: 'setting:command' };
}

/**
 * Decide how to start fastcoder-lsp, in this order:
 * 1. `fastcoder.server.command` (array or string) when non-empty;
 * 2. `fastcoder.server.pythonPath` when non-empty: `<python> -m lsp_server`;
 * 3. `<workspace folder>/.venv/bin/fastcoder-lsp` (Windows: `.venv\Scripts\fastcoder-lsp.exe`), first folder first;
 * 4. `fastcoder-lsp` on PATH.
 *
 * @returns the command, or a `ResolveError` naming the settings to set. Never throws.
 */
export function resolveServerCommand(settings: ServerSettings, env: ResolveEnvironment): ResolvedCommand | ResolveError {
  if (settings.command !== undefined && settings.command !== null) {
    const fromSetting = fromCommandSetting(settings.command, env);
    if (fromSetting) {
      return fromSetting;
    }
  }
  const python = (settings.pythonPath ?? '').trim();
  if (python) {
    return { command: expandVariables(python, env), args: ['-m', SERVER_MODULE], source: 'setting:pythonPath' };
  }
  for (const folder of env.workspaceFolders) {
    for (const candidate of venvScriptCandidates(folder, env.platform)) {
      if (env.exists(candidate)) {
        return { command: candidate, args: [], source: 'workspace-venv' };
      }
    }
  }
  const onPath = findOnPath(SERVER_SCRIPT, env);
  if (onPath) {
    return { command: onPath, args: [], source: 'PATH' };
  }
  const looked = env.workspaceFolders.length
    ? `${env.workspaceFolders.map((f) => path.join(f, '.venv')).join(', ')} and PATH`
    : 'PATH';
  return {
    error:
      `Cannot find the fastcoder language server (${SERVER_SCRIPT}); looked in ${looked}. ` +
      `Install it with \`pip install fastcoder\`, or set "fastcoder.server.pythonPath" to a Python ` +
      `that has it, or "fastcoder.server.command" to the command that starts it.`,
  };
}

/** Type guard for the error branch of `resolveServerCommand`. */
export function isResolveError(r: ResolvedCommand | ResolveError): r is ResolveError {
  return (r as ResolveError).error !== undefined;
}

/** One line for the log: `fastcoder-lsp: /x/.venv/bin/fastcoder-lsp (from workspace-venv)`. */
export function describeCommand(r: ResolvedCommand): string {
  const quoted = [r.command, ...r.args].map((w) => (/\s/.test(w) ? JSON.stringify(w) : w)).join(' ');
  return `${quoted} (from ${r.source})`;
}
