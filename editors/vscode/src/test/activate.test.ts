/**
 * activate() with a mocked `vscode` module (no VS Code binary): commands are registered, the status
 * bar item is shown, and a missing server gives an error message with an "Open settings" action
 * that opens the fastcoder.server settings.
 */
import { strict as assert } from 'assert';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { describe, it } from 'node:test';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const Module = require('module');

interface Recorded {
  commands: Map<string, (...args: unknown[]) => unknown>;
  executed: unknown[][];
  errors: { message: string; actions: string[] }[];
  statusTexts: string[];
}

/** A permissive stand-in: any unknown property is a no-op function/class that returns another stand-in. */
function anything(): any {
  const fn = function () {
    return anything();
  };
  return new Proxy(fn, {
    get: (_t, prop) => (prop === 'then' ? undefined : prop === Symbol.toPrimitive ? () => '' : anything()),
    construct: () => anything(),
  });
}

function mockVscode(rec: Recorded, settings: Record<string, unknown>, folders: string[]) {
  const disposable = { dispose: () => undefined };
  const statusItem: Record<string, unknown> = { show: () => undefined, dispose: () => undefined };
  Object.defineProperty(statusItem, 'text', {
    set: (v: string) => rec.statusTexts.push(v),
    get: () => rec.statusTexts[rec.statusTexts.length - 1],
  });
  const channel = { info: () => undefined, warn: () => undefined, error: () => undefined, show: () => undefined, dispose: () => undefined, appendLine: () => undefined };
  const api: Record<string, unknown> = {
    StatusBarAlignment: { Left: 1, Right: 2 },
    ConfigurationTarget: { Global: 1 },
    QuickPickItemKind: { Separator: -1, Default: 0 },
    ProgressLocation: { Window: 10 },
    ThemeColor: class {
      constructor(public id: string) {}
    },
    window: {
      createOutputChannel: () => channel,
      createStatusBarItem: () => statusItem,
      showErrorMessage: (message: string, ...actions: string[]) => {
        rec.errors.push({ message, actions });
        return Promise.resolve('Open settings');
      },
      showWarningMessage: () => Promise.resolve(undefined),
      showInformationMessage: () => Promise.resolve(undefined),
      setStatusBarMessage: () => disposable,
      onDidChangeTextEditorSelection: () => disposable,
    },
    commands: {
      registerCommand: (id: string, fn: (...args: unknown[]) => unknown) => {
        rec.commands.set(id, fn);
        return disposable;
      },
      executeCommand: (...args: unknown[]) => {
        rec.executed.push(args);
        return Promise.resolve(undefined);
      },
    },
    workspace: {
      getConfiguration: () => ({ get: (key: string, dflt?: unknown) => (key in settings ? settings[key] : dflt), update: () => Promise.resolve() }),
      workspaceFolders: folders.map((f) => ({ uri: { fsPath: f } })),
      onDidChangeConfiguration: () => disposable,
      onDidChangeTextDocument: () => disposable,
    },
  };
  return new Proxy(api, { get: (t, prop: string) => (prop in t ? t[prop] : anything()) });
}

/**
 * Run ``body`` with a fresh load of the extension against a mocked `vscode` (settings: no server command) and PATH
 * set to an empty folder, so no fastcoder-lsp is found; restores both afterwards.
 */
async function withMockedVscode(body: (ext: any, rec: Recorded) => Promise<void>): Promise<void> {
  const rec: Recorded = { commands: new Map(), executed: [], errors: [], statusTexts: [] };
  const emptyWorkspace = fs.mkdtempSync(path.join(os.tmpdir(), 'fastcoder-activate-'));
  const vscodeMock = mockVscode(rec, { enable: true, 'server.command': '', 'server.pythonPath': '' }, [emptyWorkspace]);
  const originalLoad = Module._load;
  const savedPath = process.env.PATH;
  Module._load = function (request: string, ...rest: unknown[]) {
    return request === 'vscode' ? vscodeMock : originalLoad.call(this, request, ...rest);
  };
  process.env.PATH = emptyWorkspace; // no fastcoder-lsp anywhere
  try {
    for (const m of ['../extension', '../cursor', '../settings', '../serverCommand', '../status']) {
      delete require.cache[require.resolve(m)]; // load them again against this test's vscode mock
    }
    await body(require('../extension'), rec);
  } finally {
    Module._load = originalLoad;
    process.env.PATH = savedPath;
    fs.rmSync(emptyWorkspace, { recursive: true, force: true });
  }
}

describe('activate() with a mocked vscode', () => {
  it('registers the commands and reports a missing server with an Open settings action', async () => {
    await withMockedVscode(async (ext, rec) => {
      const context = { subscriptions: [] as unknown[] };
      await ext.activate(context);
      for (const id of ['fastcoder.restartServer', 'fastcoder.rebuildIndex', 'fastcoder.showLog', 'fastcoder.toggleInlineCompletions', 'fastcoder.showStatus']) {
        assert.ok(rec.commands.has(id), `command ${id} not registered`);
      }
      assert.equal(rec.errors.length, 1, JSON.stringify(rec.errors));
      assert.match(rec.errors[0].message, /Cannot find the fastcoder language server/);
      assert.deepEqual(rec.errors[0].actions, ['Open settings', 'Show log']);
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(rec.executed[0], ['workbench.action.openSettings', 'fastcoder.server']);
      assert.equal(rec.statusTexts[rec.statusTexts.length - 1], '$(error) fastcoder');
      await ext.deactivate();
    });
  });
});

describe('a restart while a status request is out', () => {
  it("does not show the old server's ready status over the new server's loading", async () => {
    await withMockedVscode(async ({ FastcoderExtension }, rec) => {
      const ext = new FastcoderExtension();
      let answer: (v: unknown) => void = () => undefined;
      const oldClient = {
        isRunning: () => true,
        sendRequest: () => new Promise((resolve) => (answer = resolve)),
        stop: () => Promise.resolve(),
      };
      ext.client = oldClient; // the server being restarted, its status request still out
      const pending = ext.refreshStatus();
      await ext.stop(); // what restart() does first; the new client then starts loading
      answer({ state: 'ready', lastLatencyMs: 131 }); // the old server's answer arrives late
      await pending;
      assert.equal(ext.serverStatus, undefined);
      assert.match(rec.statusTexts[rec.statusTexts.length - 1], /^\$\(sync~spin\) fastcoder: /);
      // the same request answered before any restart is shown
      ext.client = oldClient;
      const shown = ext.refreshStatus();
      answer({ state: 'ready', lastLatencyMs: 131 });
      await shown;
      assert.equal(rec.statusTexts[rec.statusTexts.length - 1], '$(check) fastcoder 131 ms');
      ext.dispose();
    });
  });
});

describe('a completion request that ends after a restart', () => {
  it('does not end the spinner of a request sent to the new server', async () => {
    await withMockedVscode(async ({ FastcoderExtension }) => {
      const ext = new FastcoderExtension();
      const provide = ext.clientOptions().middleware.provideInlineCompletionItems;
      const token = { isCancellationRequested: true }; // no status refresh after each answer
      const answers: ((v: unknown) => void)[] = [];
      const next = () => new Promise((resolve) => answers.push(resolve));
      const before = provide({}, {}, {}, token, next); // asked of the server about to be restarted
      assert.equal(ext.clientState.generating, true);
      await ext.restart(); // the new server is not found here: start() reports it and returns
      const after = provide({}, {}, {}, token, next); // asked of the new server
      answers[0](null);
      await before;
      assert.equal(ext.clientState.generating, true); // the new server's request is still out
      answers[1](null);
      await after;
      assert.equal(ext.clientState.generating, false);
      ext.dispose();
    });
  });
});
