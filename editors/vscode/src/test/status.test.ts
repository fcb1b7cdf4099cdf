import { strict as assert } from 'assert';
import { describe, it } from 'node:test';
import { formatMs, formatStatus, median, normalizeStatus, tooltipLines, ClientState } from '../status';

const on: ClientState = { enabled: true, generating: false };

describe('formatMs / median', () => {
  it('formats milliseconds and seconds, and unknown as -', () => {
    assert.equal(formatMs(84.6), '85 ms');
    assert.equal(formatMs(1234), '1.2 s');
    assert.equal(formatMs(undefined), '-');
    assert.equal(formatMs(NaN), '-');
  });
  it('computes the median of odd and even lists', () => {
    assert.equal(median([30, 10, 20]), 20);
    assert.equal(median([10, 20, 30, 40]), 25);
    assert.equal(median([]), undefined);
  });
});

describe('formatStatus', () => {
  const ready = { state: 'ready', model: 'tiny-py-coder', device: 'cpu', method: 'fastcoder', lastLatencyMs: 42, latencies: [40, 42], meanAcceptedLength: 2.345 };

  it('shows ready with the last latency, and details in the tooltip', () => {
    const v = formatStatus(ready, on);
    assert.equal(v.text, '$(check) fastcoder 42 ms');
    assert.equal(v.kind, 'normal');
    assert.match(v.tooltip, /model: tiny-py-coder/);
    assert.match(v.tooltip, /mean accepted length: 2\.35 tokens\/forward/);
    assert.match(v.tooltip, /last latency: 42 ms/);
  });
  it('shows loading (with progress) before the first status and while the model loads', () => {
    assert.equal(formatStatus(undefined, on).text, '$(sync~spin) fastcoder: starting');
    assert.equal(formatStatus({ state: 'loading' }, { ...on, progress: 'loading model 40%' }).text, '$(sync~spin) fastcoder: loading model 40%');
    assert.equal(formatStatus({ state: 'loading' }, on).kind, 'busy');
  });
  it('shows generating while a request is in flight', () => {
    const v = formatStatus(ready, { ...on, generating: true });
    assert.equal(v.text, '$(loading~spin) fastcoder');
    assert.equal(v.kind, 'busy');
  });
  it('shows server and start errors, start errors first', () => {
    const err = formatStatus({ state: 'error', error: 'model not found: /x' }, on);
    assert.equal(err.kind, 'error');
    assert.match(err.tooltip, /model not found: \/x/);
    const start = formatStatus(ready, { ...on, startError: 'Cannot find fastcoder-lsp' });
    assert.equal(start.text, '$(error) fastcoder');
    assert.match(start.tooltip, /Cannot find fastcoder-lsp/);
  });
  it('shows disabled when inline completions are toggled off', () => {
    const v = formatStatus(ready, { ...on, enabled: false });
    assert.equal(v.text, '$(circle-slash) fastcoder');
    assert.equal(v.kind, 'warning');
  });
  it('falls back to latencies[] when lastLatencyMs is missing', () => {
    assert.equal(formatStatus({ state: 'ready', latencies: [5, 7] }, on).text, '$(check) fastcoder 7 ms');
    assert.ok(tooltipLines({ state: 'ready' }).includes('mean accepted length: -'));
  });
});

describe('normalizeStatus', () => {
  it('accepts the contract camelCase keys', () => {
    const s = normalizeStatus({ state: 'ready', model: 'm', lastLatencyMs: 12, latencies: [10, 12], meanAcceptedLength: 2.5, error: null });
    assert.deepEqual(s, { state: 'ready', model: 'm', device: null, method: null, lastLatencyMs: 12, latencies: [10, 12], meanAcceptedLength: 2.5, error: null, message: null });
  });
  it('accepts snake_case keys and drops wrong types', () => {
    const s = normalizeStatus({ state: 'ready', latencies_ms: [7, 'x', 9], mean_accepted_length: 3, device: 5 });
    assert.ok(s);
    assert.deepEqual(s.latencies, [7, 9]);
    assert.equal(s.meanAcceptedLength, 3);
    assert.equal(s.device, null);
    assert.equal(formatStatus(s, on).text, '$(check) fastcoder 9 ms');
  });
  it('rejects non-objects', () => {
    assert.equal(normalizeStatus(null), undefined);
    assert.equal(normalizeStatus([1]), undefined);
    assert.equal(normalizeStatus('ready'), undefined);
  });
});
