/**
 * Where the cursor comes to rest, told to the server (`fastcoder/cursor`) so that it prefills the prompt there
 * before the first keystroke: a jump to another function otherwise makes the first request after it prefill
 * ~900 cold prompt tokens (120-300 ms on 2 cores). The server ignores it when `fastcoder.warmOnCursor` is off.
 *
 * Pure logic (timers and the send function injected) so that it is tested without VS Code.
 */

export const CURSOR_METHOD = 'fastcoder/cursor';
/** Milliseconds the cursor must stay put before its position is sent (lsp_server/bench_latency.py CURSOR_REST_S). */
export const CURSOR_REST_MS = 150;

export interface CursorParams {
  textDocument: { uri: string };
  position: { line: number; character: number };
}

export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const realTimers: Timers = { set: (fn, ms) => setTimeout(fn, ms), clear: (h) => clearTimeout(h as NodeJS.Timeout) };

/** Debounces cursor moves: `moved` on every move; `send` once per rest, never twice for the same place. */
export class CursorReporter {
  private timer: unknown;
  private pending: CursorParams | undefined;
  private lastSent = '';

  constructor(
    private readonly send: (params: CursorParams) => void,
    private readonly restMs: number = CURSOR_REST_MS,
    private readonly timers: Timers = realTimers,
  ) {}

  moved(uri: string, line: number, character: number): void {
    this.pending = { textDocument: { uri }, position: { line, character } };
    if (this.timer !== undefined) this.timers.clear(this.timer);
    this.timer = this.timers.set(() => this.flush(), this.restMs);
  }

  /** Forget the last place sent (the document changed: the same place needs a new prefill). */
  edited(): void {
    this.lastSent = '';
  }

  dispose(): void {
    if (this.timer !== undefined) this.timers.clear(this.timer);
    this.timer = undefined;
    this.pending = undefined;
  }

  private flush(): void {
    this.timer = undefined;
    const p = this.pending;
    this.pending = undefined;
    if (!p) return;
    const key = `${p.textDocument.uri}:${p.position.line}:${p.position.character}`;
    if (key === this.lastSent) return;
    this.lastSent = key;
    try {
      this.send(p);
    } catch {
      // a stopped client: nothing to warm
    }
  }
}
