import { strict as assert } from 'assert';
import { describe, it } from 'node:test';
import {
  describeCommand,
  expandVariables,
  isResolveError,
  resolveServerCommand,
  splitCommandLine,
  ResolveEnvironment,
} from '../serverCommand';

function env(files: string[], extra: Partial<ResolveEnvironment> = {}): ResolveEnvironment {
  const set = new Set(files);
  return { workspaceFolders: ['/ws'], pathEnv: '/usr/local/bin:/usr/bin', platform: 'linux', homeDir: '/home/u', exists: (f) => set.has(f), ...extra };
}

describe('splitCommandLine', () => {
  it('splits on whitespace and honours quotes and escapes', () => {
    assert.deepEqual(splitCommandLine('  python  -m lsp_server '), ['python', '-m', 'lsp_server']);
    assert.deepEqual(splitCommandLine('"/opt/my env/python" -m \'lsp server\''), ['/opt/my env/python', '-m', 'lsp server']);
    assert.deepEqual(splitCommandLine('a\\ b "x\\"y" ""'), ['a b', 'x"y', '']);
    assert.deepEqual(splitCommandLine(''), []);
  });
  it('rejects an unterminated quote', () => {
    assert.throws(() => splitCommandLine('python "-m'), /unterminated/);
  });
});

describe('expandVariables', () => {
  it('expands ${workspaceFolder}, ${userHome} and a leading ~', () => {
    const e = env([]);
    assert.equal(expandVariables('${workspaceFolder}/.venv/bin/python', e), '/ws/.venv/bin/python');
    assert.equal(expandVariables('~/bin/fastcoder-lsp', e), '/home/u/bin/fastcoder-lsp');
    assert.equal(expandVariables('${userHome}/x', e), '/home/u/x');
    assert.equal(expandVariables('a~b', e), 'a~b');
  });
});

describe('resolveServerCommand', () => {
  it('prefers fastcoder.server.command given as an array', () => {
    const r = resolveServerCommand({ command: ['${workspaceFolder}/run.sh', '--stdio'], pythonPath: '/usr/bin/python3' }, env(['/ws/.venv/bin/fastcoder-lsp']));
    assert.deepEqual(r, { command: '/ws/run.sh', args: ['--stdio'], source: 'setting:command' });
  });
  it('accepts fastcoder.server.command given as a string', () => {
    const r = resolveServerCommand({ command: '/opt/py/bin/python -m lsp_server' }, env([]));
    assert.deepEqual(r, { command: '/opt/py/bin/python', args: ['-m', 'lsp_server'], source: 'setting:command' });
  });
  it('falls through an empty command to pythonPath', () => {
    for (const command of ['', '   ', []]) {
      const r = resolveServerCommand({ command, pythonPath: '~/venv/bin/python' }, env([]));
      assert.deepEqual(r, { command: '/home/u/venv/bin/python', args: ['-m', 'lsp_server'], source: 'setting:pythonPath' });
    }
  });
  it('reports a broken command setting instead of throwing', () => {
    const r = resolveServerCommand({ command: 'python "oops' }, env([]));
    assert.ok(isResolveError(r));
    assert.match(r.error, /fastcoder\.server\.command is invalid/);
  });
  it('detects the workspace .venv before PATH', () => {
    const r = resolveServerCommand({}, env(['/ws/.venv/bin/fastcoder-lsp', '/usr/bin/fastcoder-lsp']));
    assert.deepEqual(r, { command: '/ws/.venv/bin/fastcoder-lsp', args: [], source: 'workspace-venv' });
  });
  it('looks in every workspace folder, in order', () => {
    const r = resolveServerCommand({}, env(['/b/.venv/bin/fastcoder-lsp'], { workspaceFolders: ['/a', '/b'] }));
    assert.ok(!isResolveError(r));
    assert.equal(r.command, '/b/.venv/bin/fastcoder-lsp');
  });
  it('uses .venv\\Scripts on Windows', () => {
    const r = resolveServerCommand({}, env(['C:\\ws\\.venv\\Scripts\\fastcoder-lsp.exe'], { workspaceFolders: ['C:\\ws'], platform: 'win32', pathEnv: '' }));
    assert.ok(!isResolveError(r));
    assert.equal(r.command, 'C:\\ws\\.venv\\Scripts\\fastcoder-lsp.exe');
  });
  it('finds fastcoder-lsp on PATH', () => {
    const r = resolveServerCommand({ pythonPath: '  ' }, env(['/usr/bin/fastcoder-lsp']));
    assert.deepEqual(r, { command: '/usr/bin/fastcoder-lsp', args: [], source: 'PATH' });
  });
  it('explains what to set when nothing is found', () => {
    const r = resolveServerCommand({}, env([]));
    assert.ok(isResolveError(r));
    assert.match(r.error, /Cannot find the fastcoder language server/);
    assert.match(r.error, /fastcoder\.server\.pythonPath/);
    assert.match(r.error, /fastcoder\.server\.command/);
    assert.match(r.error, /\/ws\/\.venv/);
  });
  it('describes a command for the log, quoting words with spaces', () => {
    assert.equal(describeCommand({ command: '/my env/python', args: ['-m', 'lsp_server'], source: 'setting:pythonPath' }), '"/my env/python" -m lsp_server (from setting:pythonPath)');
  });
});
