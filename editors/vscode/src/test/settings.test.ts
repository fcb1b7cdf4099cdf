import { strict as assert } from 'assert';
import { describe, it } from 'node:test';
import { buildServerSettings, configurationPayload, documentSelector, serverEnvironment } from '../settings';

const getter = (values: Record<string, unknown>) => (key: string) => values[key];

describe('buildServerSettings', () => {
  it('passes valid values through under the server contract names', () => {
    const s = buildServerSettings(
      getter({
        model: ' /models/tiny ', method: 'rest', maxNewTokens: 32, maxPromptTokens: 512, stopAt: 'block',
        commonDatastore: 'none', repoIndex: false, exclude: ['*.min.js', 'build/**'], device: 'cuda', dtype: 'float32',
        temperature: 0.2,
      }),
    );
    assert.deepEqual(s, {
      model: '/models/tiny', method: 'rest', maxNewTokens: 32, maxPromptTokens: 512, stopAt: 'block',
      commonDatastore: 'none', repoIndex: false, exclude: ['*.min.js', 'build/**'], device: 'cuda', dtype: 'float32',
      temperature: 0.2,
    });
  });
  it('drops empty, mistyped and out-of-range values so the server default applies', () => {
    const s = buildServerSettings(
      getter({
        model: '', method: 'medusa', maxNewTokens: 0, maxPromptTokens: null, stopAt: 'file', commonDatastore: '  ',
        repoIndex: 'yes', exclude: ['ok', 3, ''], device: 'tpu', dtype: 'int8', temperature: -1,
      }),
    );
    assert.deepEqual(s, { exclude: ['ok'] });
  });
  it('passes the typing and indexing switches through, dropping mistyped ones', () => {
    const s = buildServerSettings(
      getter({ tokenHealing: false, typeThrough: true, warmCache: 'no', deadlineMs: 150, maxIncrementalFiles: -3,
        maxFileBytes: 2048 }),
    );
    assert.deepEqual(s, { tokenHealing: false, typeThrough: true, deadlineMs: 150, maxFileBytes: 2048 });
  });
  it('wraps the settings in the fastcoder section for didChangeConfiguration', () => {
    assert.deepEqual(configurationPayload(getter({ maxNewTokens: 8 })), { fastcoder: { maxNewTokens: 8 } });
  });
});

describe('documentSelector', () => {
  it('selects file and untitled documents of each language, python by default', () => {
    assert.deepEqual(documentSelector(undefined), [
      { scheme: 'file', language: 'python' },
      { scheme: 'untitled', language: 'python' },
    ]);
    assert.equal(documentSelector(['python', 'cython']).length, 4);
  });
});

describe('serverEnvironment', () => {
  it('merges string variables from fastcoder.server.env and forces unbuffered Python', () => {
    const env = serverEnvironment({ PATH: '/bin', DROP: undefined }, { FASTCODER_MODEL: '/m', BAD: 1 });
    assert.deepEqual(env, { PATH: '/bin', FASTCODER_MODEL: '/m', PYTHONUNBUFFERED: '1' });
  });
});
