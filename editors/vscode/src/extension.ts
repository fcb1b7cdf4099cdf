/**
 * fastcoder VS Code extension: starts fastcoder-lsp over stdio with vscode-languageclient, which
 * registers the server's `inlineCompletionProvider` as a VS Code inline completion provider.
 * Adds a status bar item, settings sync and commands (restart, rebuild index, show log, toggle).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as vscode from 'vscode';
import {
  CancellationToken,
  ErrorCodes,
  LanguageClient,
  LanguageClientOptions,
  ResponseError,
  ServerOptions,
  State,
  TransportKind,
} from 'vscode-languageclient/node';
import { CURSOR_METHOD, CursorReporter } from './cursor';
import { describeCommand, isResolveError, resolveServerCommand } from './serverCommand';
import { configurationPayload, documentSelector, RESTART_KEYS, serverEnvironment } from './settings';
import { ClientState, formatStatus, normalizeStatus, ServerStatus, tooltipLines } from './status';

const SECTION = 'fastcoder';
const STATUS_METHOD = 'fastcoder/status';
const REBUILD_INDEX_METHOD = 'fastcoder/rebuildIndex';
/** Poll `fastcoder/status` this often while the model loads (ms). */
const LOADING_POLL_MS = 1500;
/** ...and this often once ready, to notice errors (ms). */
const READY_POLL_MS = 30000;

function config(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration(SECTION);
}

function isFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

/** The extension's state: its language client, status bar item, commands and settings sync (exported for tests). */
export class FastcoderExtension implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private readonly output = vscode.window.createOutputChannel('fastcoder', { log: true });
  private readonly statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  private serverStatus: ServerStatus | undefined;
  private readonly clientState: ClientState = { enabled: true, generating: false };
  private inFlight = 0;
  /** Restarts so far: a request sent to a server before a restart does not count in the new one's `inFlight`. */
  private restarts = 0;
  private pollTimer: NodeJS.Timeout | undefined;
  private lastPoll = 0;
  private statusSupported = true;
  private readonly disposables: vscode.Disposable[] = [];
  /** Tells the server where the cursor rests, so it prefills the prompt there before the first keystroke. */
  private readonly cursor = new CursorReporter((params) => {
    const client = this.client;
    if (client && client.isRunning() && this.clientState.enabled) {
      void client.sendNotification(CURSOR_METHOD, params).catch(() => undefined);
    }
  });

  constructor() {
    this.statusItem.command = 'fastcoder.showStatus';
    this.statusItem.name = 'fastcoder';
    this.clientState.enabled = config().get<boolean>('enable', true);
    this.render();
    this.statusItem.show();
  }

  register(context: vscode.ExtensionContext): void {
    const cmd = (id: string, fn: () => unknown) => vscode.commands.registerCommand(id, fn);
    this.disposables.push(
      cmd('fastcoder.restartServer', () => this.restart()),
      cmd('fastcoder.rebuildIndex', () => this.rebuildIndex()),
      cmd('fastcoder.showLog', () => this.output.show(true)),
      cmd('fastcoder.toggleInlineCompletions', () => this.toggle()),
      cmd('fastcoder.showStatus', () => this.showStatusMenu()),
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfigurationChanged(e)),
      vscode.window.onDidChangeTextEditorSelection((e) => this.onSelection(e)),
      vscode.workspace.onDidChangeTextDocument(() => this.cursor.edited()),
    );
    context.subscriptions.push(this);
  }

  /** A single cursor (no selection) in a document the server serves: report where it goes. */
  private onSelection(e: vscode.TextEditorSelectionChangeEvent): void {
    const sel = e.selections;
    if (sel.length !== 1 || !sel[0].isEmpty) return;
    const doc = e.textEditor.document;
    if (vscode.languages.match(documentSelector(config().get('languages')), doc) <= 0) return;
    this.cursor.moved(doc.uri.toString(), sel[0].active.line, sel[0].active.character);
  }

  dispose(): void {
    this.cursor.dispose();
    this.stopPolling();
    void this.stop();
    for (const d of this.disposables) d.dispose();
    this.statusItem.dispose();
    this.output.dispose();
  }

  async start(): Promise<void> {
    const cfg = config();
    const resolved = resolveServerCommand(
      { command: cfg.get<string | string[]>('server.command'), pythonPath: cfg.get<string>('server.pythonPath') },
      {
        workspaceFolders: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath),
        pathEnv: process.env.PATH,
        platform: process.platform,
        homeDir: os.homedir(),
        exists: isFile,
      },
    );
    if (isResolveError(resolved)) {
      this.output.error(resolved.error);
      this.failed(resolved.error);
      return;
    }
    this.output.info(`starting fastcoder-lsp: ${describeCommand(resolved)}`);
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const serverOptions: ServerOptions = {
      command: resolved.command,
      args: resolved.args,
      transport: TransportKind.stdio,
      options: { cwd: folder, env: serverEnvironment(process.env, cfg.get('server.env')) },
    };
    const client = new LanguageClient('fastcoder', 'fastcoder', serverOptions, this.clientOptions());
    client.registerProposedFeatures(); // needed on languageclient 9.x / 10.0.0; a no-op later
    client.onDidChangeState((e) => {
      if (e.newState === State.Stopped && this.client === client) {
        this.serverStatus = undefined;
        this.clientState.startError = 'the server stopped (see the log)';
        this.render();
      }
    });
    this.client = client;
    this.clientState.startError = undefined;
    this.statusSupported = true;
    this.render();
    try {
      await client.start();
    } catch (e) {
      const msg = `fastcoder-lsp failed to start (${describeCommand(resolved)}): ${(e as Error)?.message ?? e}`;
      this.output.error(msg);
      if (this.client === client) this.client = undefined;
      void client.dispose().catch(() => undefined);
      this.failed(msg);
      return;
    }
    this.startPolling();
    void this.refreshStatus();
  }

  private clientOptions(): LanguageClientOptions {
    const get = (key: string) => config().get(key);
    return {
      documentSelector: documentSelector(config().get('languages')),
      initializationOptions: () => configurationPayload(get).fastcoder,
      synchronize: { configurationSection: SECTION },
      outputChannel: this.output,
      middleware: {
        workspace: {
          // Push only the server's keys, cleaned (see settings.ts), instead of the raw section.
          didChangeConfiguration: async () => {
            await this.client?.sendNotification('workspace/didChangeConfiguration', { settings: configurationPayload(get) });
          },
          configuration: async (params, token, next) => {
            const result = await next(params, token);
            if (!Array.isArray(result)) return result;
            return result.map((value, i) => (params.items[i]?.section === SECTION ? configurationPayload(get).fastcoder : value));
          },
        },
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          if (!this.clientState.enabled) return null;
          const restarts = this.restarts;
          this.setGenerating(+1);
          try {
            return await next(document, position, context, token);
          } finally {
            if (restarts === this.restarts) this.setGenerating(-1); // else restart() already cleared the count
            if (!token.isCancellationRequested) void this.refreshStatus();
          }
        },
      },
    };
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.stopPolling();
    if (client) {
      try {
        await client.stop(5000);
      } catch (e) {
        this.output.warn(`stopping fastcoder-lsp: ${(e as Error)?.message ?? e}`);
      }
    }
  }

  async restart(): Promise<void> {
    this.output.info('restarting fastcoder-lsp');
    await this.stop();
    this.serverStatus = undefined;
    this.restarts += 1;
    this.inFlight = 0;
    this.clientState.generating = false;
    this.clientState.progress = undefined; // the old server's last progress message is not the new one's
    await this.start();
  }

  private failed(message: string): void {
    this.clientState.startError = message;
    this.render();
    void vscode.window.showErrorMessage(message, 'Open settings', 'Show log').then((choice) => {
      if (choice === 'Open settings') {
        void vscode.commands.executeCommand('workbench.action.openSettings', 'fastcoder.server');
      } else if (choice === 'Show log') {
        this.output.show(true);
      }
    });
  }

  private setGenerating(delta: number): void {
    this.inFlight = Math.max(0, this.inFlight + delta);
    this.clientState.generating = this.inFlight > 0;
    this.render();
  }

  private render(): void {
    const view = formatStatus(this.serverStatus, this.clientState);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor =
      view.kind === 'error'
        ? new vscode.ThemeColor('statusBarItem.errorBackground')
        : view.kind === 'warning'
          ? new vscode.ThemeColor('statusBarItem.warningBackground')
          : undefined;
  }

  private startPolling(): void {
    this.stopPolling();
    this.pollTimer = setInterval(() => {
      const ready = this.serverStatus?.state === 'ready';
      if (!ready || Date.now() - this.lastPoll >= READY_POLL_MS) void this.refreshStatus();
    }, LOADING_POLL_MS);
  }

  private stopPolling(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = undefined;
  }

  /** Ask the server for `fastcoder/status` and redraw; quietly stops polling if unsupported. */
  async refreshStatus(token?: CancellationToken): Promise<ServerStatus | undefined> {
    const client = this.client;
    if (!client || !client.isRunning() || !this.statusSupported) return this.serverStatus;
    this.lastPoll = Date.now();
    try {
      const answer = await client.sendRequest<unknown>(STATUS_METHOD, {}, token);
      // A restart while the request was out: the old server's "ready" would show over the new one's loading
      // (and a user, or a test, would type before the new server can answer).
      if (this.client !== client) return this.serverStatus;
      this.serverStatus = normalizeStatus(answer);
    } catch (e) {
      if (this.client !== client) return this.serverStatus;
      if (e instanceof ResponseError && e.code === ErrorCodes.MethodNotFound) {
        this.statusSupported = false;
        this.serverStatus = { state: 'ready', error: null };
        this.output.warn(`${STATUS_METHOD} is not supported by this server; status bar shows 'ready' only`);
      } else {
        this.output.warn(`${STATUS_METHOD} failed: ${(e as Error)?.message ?? e}`);
      }
    }
    if (this.serverStatus?.state === 'ready' || this.serverStatus?.state === 'error') {
      this.clientState.progress = undefined;
    }
    this.render();
    return this.serverStatus;
  }

  private async rebuildIndex(): Promise<void> {
    const client = this.client;
    if (!client || !client.isRunning()) {
      void vscode.window.showWarningMessage('fastcoder: the server is not running.');
      return;
    }
    try {
      const result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: 'fastcoder: rebuilding the repository index' },
        () => client.sendRequest<unknown>(REBUILD_INDEX_METHOD, {}),
      );
      const detail = result && typeof result === 'object' ? ` ${JSON.stringify(result)}` : '';
      void vscode.window.showInformationMessage(`fastcoder: repository index rebuilt.${detail}`);
    } catch (e) {
      if (e instanceof ResponseError && e.code === ErrorCodes.MethodNotFound) {
        void vscode.window.showWarningMessage(`fastcoder: this server does not support ${REBUILD_INDEX_METHOD}; restart the server to re-index.`);
      } else {
        void vscode.window.showErrorMessage(`fastcoder: rebuilding the index failed: ${(e as Error)?.message ?? e}`);
      }
    }
  }

  private async toggle(): Promise<void> {
    const next = !config().get<boolean>('enable', true);
    await config().update('enable', next, vscode.ConfigurationTarget.Global);
    this.clientState.enabled = next;
    this.render();
    void vscode.window.setStatusBarMessage(`fastcoder: inline completions ${next ? 'on' : 'off'}`, 3000);
  }

  private async showStatusMenu(): Promise<void> {
    const status = await this.refreshStatus();
    const actions: (vscode.QuickPickItem & { command?: string })[] = [
      ...tooltipLines(status).map((label) => ({ label, kind: vscode.QuickPickItemKind.Default })),
      { label: '', kind: vscode.QuickPickItemKind.Separator },
      { label: this.clientState.enabled ? '$(circle-slash) Turn inline completions off' : '$(check) Turn inline completions on', command: 'fastcoder.toggleInlineCompletions' },
      { label: '$(debug-restart) Restart server', command: 'fastcoder.restartServer' },
      { label: '$(database) Rebuild repository index', command: 'fastcoder.rebuildIndex' },
      { label: '$(output) Show log', command: 'fastcoder.showLog' },
      { label: '$(gear) Open settings', command: 'workbench.action.openSettings' },
    ];
    const pick = await vscode.window.showQuickPick(actions, { title: 'fastcoder', placeHolder: this.statusItem.text });
    if (pick?.command === 'workbench.action.openSettings') {
      await vscode.commands.executeCommand(pick.command, SECTION);
    } else if (pick?.command) {
      await vscode.commands.executeCommand(pick.command);
    }
  }

  private onConfigurationChanged(e: vscode.ConfigurationChangeEvent): void {
    if (!e.affectsConfiguration(SECTION)) return;
    if (e.affectsConfiguration(`${SECTION}.enable`)) {
      this.clientState.enabled = config().get<boolean>('enable', true);
      this.render();
    }
    if (RESTART_KEYS.some((k) => e.affectsConfiguration(`${SECTION}.${k}`))) {
      void this.restart();
    }
  }
}

let extension: FastcoderExtension | undefined;

/** VS Code entry point: register commands and start the server. */
export async function activate(context: vscode.ExtensionContext): Promise<void> {
  extension = new FastcoderExtension();
  extension.register(context);
  await extension.start();
}

/** VS Code exit point: stop the server (waits up to 5 s). */
export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}
