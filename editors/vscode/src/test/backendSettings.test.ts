import { strict as assert } from 'assert';
import { describe, it } from 'node:test';
import { buildServerSettings } from '../settings';

const getter = (values: Record<string, unknown>) => (key: string) => values[key];

describe('backend settings (local | openai endpoint)', () => {
  it('passes the openai backend, its endpoint, model name and repository id through', () => {
    const s = buildServerSettings(
      getter({ backend: 'openai', endpoint: ' http://127.0.0.1:8000/v1 ', endpointModel: 'qwen', repoId: 'auto' }),
    );
    assert.deepEqual(s, { backend: 'openai', endpoint: 'http://127.0.0.1:8000/v1', endpointModel: 'qwen', repoId: 'auto' });
  });
  it('drops an unknown backend, a URL without http(s) and empty names', () => {
    const s = buildServerSettings(getter({ backend: 'vllm', endpoint: 'localhost:8000', endpointModel: ' ', repoId: '' }));
    assert.deepEqual(s, {});
  });
});
