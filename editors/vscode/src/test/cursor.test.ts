import { strict as assert } from 'assert';
import { describe, it } from 'node:test';
import { CursorParams, CursorReporter, Timers } from '../cursor';

/** Timers run by hand: `fire()` runs the pending callback. */
function manualTimers(): Timers & { fire(): void; pending(): number } {
  let next = 0;
  const live = new Map<number, () => void>();
  return {
    set: (fn) => { live.set(++next, fn); return next; },
    clear: (h) => { live.delete(h as number); },
    fire: () => { for (const [h, fn] of [...live]) { live.delete(h); fn(); } },
    pending: () => live.size,
  };
}

describe('CursorReporter', () => {
  it('sends the last position once the cursor rests, not every move', () => {
    const sent: CursorParams[] = [];
    const t = manualTimers();
    const r = new CursorReporter((p) => sent.push(p), 150, t);
    r.moved('file:///a.py', 1, 2);
    r.moved('file:///a.py', 5, 4);
    assert.equal(t.pending(), 1);
    t.fire();
    assert.deepEqual(sent, [{ textDocument: { uri: 'file:///a.py' }, position: { line: 5, character: 4 } }]);
  });
  it('does not send the same place twice unless the document was edited', () => {
    const sent: CursorParams[] = [];
    const t = manualTimers();
    const r = new CursorReporter((p) => sent.push(p), 150, t);
    r.moved('file:///a.py', 3, 0);
    t.fire();
    r.moved('file:///a.py', 3, 0);
    t.fire();
    assert.equal(sent.length, 1);
    r.edited();
    r.moved('file:///a.py', 3, 0);
    t.fire();
    assert.equal(sent.length, 2);
  });
  it('sends nothing after dispose and survives a failing send', () => {
    const t = manualTimers();
    let calls = 0;
    const r = new CursorReporter(() => { calls++; throw new Error('client stopped'); }, 150, t);
    r.moved('file:///a.py', 0, 0);
    t.fire();
    assert.equal(calls, 1);
    r.moved('file:///b.py', 0, 0);
    r.dispose();
    t.fire();
    assert.equal(calls, 1);
  });
});
