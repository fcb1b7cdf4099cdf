/**
 * End-to-end: drive the real Python server (`python -m lsp_server`) over stdio with the protocol
 * library vscode-languageclient uses (vscode-languageserver-protocol), the way VS Code would:
 * initialize with VS Code-like capabilities, settings via initializationOptions and
 * workspace/configuration, fastcoder/status until ready, textDocument/inlineCompletion on a real
 * file, $/cancelRequest and cancel-previous.
 *
 * Skips (with the reason) when the Python environment or the test model is missing:
 *   FASTCODER_TEST_PYTHON  interpreter with fastcoder installed (default: <repo>/.venv/bin/python)
 *   FASTCODER_TEST_MODEL   model path (default: <repo>/../shared/models/tiny-py-coder)
 */
import { strict as assert } from 'assert';
import { ChildProcess, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'url';
import {
  CancellationTokenSource,
  ConfigurationRequest,
  createProtocolConnection,
  DidOpenTextDocumentNotification,
  ExitNotification,
  InitializedNotification,
  InitializeRequest,
  InitializeResult,
  InlineCompletionItem,
  InlineCompletionList,
  InlineCompletionRequest,
  InlineCompletionTriggerKind,
  LogMessageNotification,
  ProtocolConnection,
  RegistrationRequest,
  ShowMessageNotification,
  ShutdownRequest,
  StreamMessageReader,
  StreamMessageWriter,
  WorkDoneProgressCreateRequest,
} from 'vscode-languageserver-protocol/node';
import { normalizeStatus, ServerStatus } from '../status';

const REPO = path.resolve(__dirname, '..', '..', '..', '..');
const PYTHON = process.env.FASTCODER_TEST_PYTHON || path.join(REPO, '.venv', 'bin', 'python');
const MODEL = process.env.FASTCODER_TEST_MODEL || path.resolve(REPO, '..', 'shared', 'models', 'tiny-py-coder');
const READY_TIMEOUT_MS = 180_000;

/** Why the end-to-end suite cannot run here, or undefined when it can. */
function skipReason(): string | undefined {
  if (!fs.existsSync(PYTHON)) return `no Python at ${PYTHON} (set FASTCODER_TEST_PYTHON)`;
  if (!fs.existsSync(MODEL)) return `no test model at ${MODEL} (set FASTCODER_TEST_MODEL)`;
  const probe = spawnSync(PYTHON, ['-c', 'import lsp_server.server'], { cwd: REPO, encoding: 'utf8', timeout: 120_000 });
  if (probe.status !== 0) return `lsp_server is not importable with ${PYTHON}: ${(probe.stderr || '').trim().split('\n').pop()}`;
  return undefined;
}

const SOURCE = [
  'import os',
  '',
  '',
  'def list_python_files(root):',
  '    """Return the paths of the .py files below root."""',
  '    result = []',
  '    for dirpath, dirnames, filenames in os.walk(root):',
  '        for name in filenames:',
  '            if name.endswith(".py"):',
  '                result.append(os.path.join(dirpath, name))',
  '    return result',
  '',
  '',
  'def count_lines(path):',
  '    with open(path) as f:',
  '        return len(f.readlines())',
  '',
  '',
  'def main():',
  '    for path in list_python_files(".',
  '',
].join('\n');
/** Cursor after `list_python_files(".` on line 19 (0-based). */
const POSITION = { line: 19, character: 36 };

const SETTINGS = { model: MODEL, method: 'fastcoder', maxNewTokens: 24, stopAt: 'line', commonDatastore: 'none', repoIndex: true, device: 'cpu', temperature: 0 };

function items(result: InlineCompletionList | InlineCompletionItem[] | null): InlineCompletionItem[] {
  if (!result) return [];
  return Array.isArray(result) ? result : result.items;
}

function insertText(item: InlineCompletionItem): string {
  return typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
}

const reason = skipReason();

describe('fastcoder-lsp end to end (vscode-languageserver-protocol)', { skip: reason, timeout: 300_000 }, () => {
  let proc: ChildProcess;
  let conn: ProtocolConnection;
  let workspace: string;
  let uri: string;
  let init: InitializeResult;
  const stderr: string[] = [];
  const logs: string[] = [];
  const settingsPulled: unknown[] = [];

  before(async () => {
    workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'fastcoder-vscode-e2e-'));
    const file = path.join(workspace, 'walk.py');
    fs.writeFileSync(file, SOURCE);
    uri = pathToFileURL(file).toString();
    proc = spawn(PYTHON, ['-m', 'lsp_server'], {
      cwd: REPO,
      env: { ...process.env, PYTHONUNBUFFERED: '1', FASTCODER_MODEL: MODEL },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    proc.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
    conn = createProtocolConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
    conn.onRequest(WorkDoneProgressCreateRequest.type, () => undefined);
    conn.onRequest(RegistrationRequest.type, () => undefined);
    conn.onRequest(ConfigurationRequest.type, (params) => {
      settingsPulled.push(params);
      return params.items.map((i) => (i.section === 'fastcoder' ? SETTINGS : null));
    });
    conn.onNotification(LogMessageNotification.type, (p) => {
      logs.push(p.message);
    });
    conn.onNotification(ShowMessageNotification.type, (p) => {
      logs.push(`[show] ${p.message}`);
    });
    conn.listen();
    init = await conn.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: pathToFileURL(workspace).toString(),
      workspaceFolders: [{ uri: pathToFileURL(workspace).toString(), name: 'e2e' }],
      initializationOptions: SETTINGS,
      capabilities: {
        window: { workDoneProgress: true },
        workspace: { configuration: true, didChangeConfiguration: { dynamicRegistration: true }, workspaceFolders: true },
        textDocument: { inlineCompletion: { dynamicRegistration: true }, synchronization: { dynamicRegistration: true } },
      },
    });
    await conn.sendNotification(InitializedNotification.type, {});
    await conn.sendNotification(DidOpenTextDocumentNotification.type, { textDocument: { uri, languageId: 'python', version: 1, text: SOURCE } });
  });

  after(async () => {
    try {
      await Promise.race([conn.sendRequest(ShutdownRequest.type), new Promise((r) => setTimeout(r, 5000))]);
      await conn.sendNotification(ExitNotification.type);
    } catch {
      // the server may already be gone; it is killed below
    }
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        proc.kill('SIGKILL');
        resolve();
      }, 5000);
      proc.once('exit', () => {
        clearTimeout(t);
        resolve();
      });
    });
    conn.dispose();
    fs.rmSync(workspace, { recursive: true, force: true });
  });

  const request = (token?: CancellationTokenSource) =>
    conn.sendRequest(
      InlineCompletionRequest.type,
      { textDocument: { uri }, position: POSITION, context: { triggerKind: InlineCompletionTriggerKind.Invoked } },
      token?.token,
    );

  async function waitReady(): Promise<ServerStatus> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    let status: ServerStatus | undefined;
    while (Date.now() < deadline) {
      status = normalizeStatus(await conn.sendRequest('fastcoder/status', {}));
      if (status?.state === 'ready' || status?.state === 'error') return status;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`server not ready after ${READY_TIMEOUT_MS} ms: ${JSON.stringify(status)}\n${stderr.join('').slice(-2000)}`);
  }

  it('advertises inline completions and reaches the ready state with the configured model', async () => {
    assert.ok(init.capabilities.inlineCompletionProvider, 'inlineCompletionProvider missing');
    const status = await waitReady();
    assert.equal(status.state, 'ready', `status: ${JSON.stringify(status)}\nlog: ${logs.join('\n')}`);
    assert.equal(status.method, 'fastcoder');
    assert.ok(status.model && status.model.includes('tiny-py-coder'), `model: ${status.model}`);
  });

  it('completes a line of a real file with a single-line item at the cursor', async () => {
    const t0 = Date.now();
    const got = items(await request());
    const ms = Date.now() - t0;
    assert.equal(got.length, 1, `items: ${JSON.stringify(got)}\nlog: ${logs.slice(-20).join('\n')}`);
    const text = insertText(got[0]);
    assert.ok(text.trim().length > 0, 'empty completion');
    // stopAt=line: one line of text (at the end of a line the server may complete the next line instead).
    const nonBlank = text.split('\n').filter((l) => l.trim() !== '');
    assert.equal(nonBlank.length, 1, `stopAt=line must give one line, got ${JSON.stringify(text)}`);
    assert.deepEqual(got[0].range, { start: POSITION, end: POSITION });
    const status = normalizeStatus(await conn.sendRequest('fastcoder/status', {}));
    assert.ok((status?.latencies?.length ?? 0) >= 1, `no latency recorded: ${JSON.stringify(status)}`);
    console.log(`# completion ${JSON.stringify(text)} in ${ms} ms (client side)`);
  });

  it('answers a request cancelled with $/cancelRequest with RequestCancelled or an empty list', async () => {
    const source = new CancellationTokenSource();
    const pending = request(source);
    source.cancel();
    const t0 = Date.now();
    let answered: InlineCompletionItem[] | undefined;
    try {
      answered = items(await pending);
    } catch (e) {
      assert.equal((e as { code?: number }).code, -32800, `unexpected error ${String(e)}`);
    }
    assert.ok(Date.now() - t0 < 5000, 'cancellation took more than 5 s');
    // The server keeps serving after a cancellation.
    const after = items(await request());
    assert.equal(after.length, 1);
    // Empty, unless the completion had finished before the server read the cancellation (a loaded machine):
    // then it is the same answer as the request that follows.
    if (answered !== undefined && answered.length > 0) {
      assert.deepEqual(answered, after, `a cancelled request returned another item: ${JSON.stringify(answered)}`);
    }
  });

  it('cancel-previous: of two quick requests for one document, the first comes back empty, the second with the item', async () => {
    const first = request();
    const second = request();
    const [a, b] = await Promise.allSettled([first, second]);
    assert.equal(b.status, 'fulfilled');
    const latest = items((b as PromiseFulfilledResult<InlineCompletionList>).value);
    assert.equal(latest.length, 1);
    if (a.status === 'fulfilled') {
      // empty, unless the first had finished before the server read the second (a loaded machine): the same item
      const firstItems = items(a.value);
      if (firstItems.length > 0) {
        assert.deepEqual(firstItems, latest, `superseded request returned another item: ${JSON.stringify(a.value)}`);
      }
    } else {
      assert.equal((a.reason as { code?: number }).code, -32800, `unexpected error ${String(a.reason)}`);
    }
  });

  it('pulled and pushed settings reach the server (workspace/configuration answered)', async () => {
    assert.ok(settingsPulled.length >= 1, 'the server never pulled workspace/configuration');
    const status = (await conn.sendRequest('fastcoder/status', {})) as { settings?: Record<string, unknown> };
    if (status.settings) {
      assert.equal(status.settings.max_new_tokens ?? status.settings.maxNewTokens, 24);
    }
  });
});
