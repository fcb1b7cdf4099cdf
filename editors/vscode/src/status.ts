/**
 * Status bar text and tooltip for the `fastcoder/status` response. Pure: no `vscode` import.
 */

/** The server's `fastcoder/status` result (all fields optional: older or partial servers). */
export interface ServerStatus {
  state?: 'loading' | 'ready' | 'error' | string;
  model?: string | null;
  device?: string | null;
  method?: string | null;
  /** Latency of the last completion request, server side, in milliseconds. */
  lastLatencyMs?: number | null;
  /** Recent request latencies in milliseconds, oldest first. */
  latencies?: number[] | null;
  /** Mean accepted length: tokens committed per forward pass (accepted draft tokens + 1). */
  meanAcceptedLength?: number | null;
  error?: string | null;
  /** Optional loading detail (e.g. "loading model 40%"). */
  message?: string | null;
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

/**
 * Turn a raw `fastcoder/status` result into a `ServerStatus`, accepting both the contract's camelCase
 * keys (`lastLatencyMs`, `latencies`, `meanAcceptedLength`) and snake_case ones (`latencies_ms`,
 * `mean_accepted_length`). Anything that is not an object gives `undefined`; wrong types are dropped.
 */
export function normalizeStatus(raw: unknown): ServerStatus | undefined {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return undefined;
  const r = raw as Record<string, unknown>;
  const latRaw = Array.isArray(r.latencies) ? r.latencies : Array.isArray(r.latencies_ms) ? r.latencies_ms : undefined;
  const latencies = latRaw?.filter((x): x is number => num(x) !== undefined);
  return {
    state: str(r.state),
    model: str(r.model) ?? null,
    device: str(r.device) ?? null,
    method: str(r.method) ?? null,
    lastLatencyMs: num(r.lastLatencyMs) ?? num(r.last_latency_ms) ?? null,
    latencies: latencies ?? null,
    meanAcceptedLength: num(r.meanAcceptedLength) ?? num(r.mean_accepted_length) ?? null,
    error: str(r.error) ?? null,
    message: str(r.message) ?? null,
  };
}

/** What the client knows besides the server's status. */
export interface ClientState {
  /** `fastcoder.enable`: inline completions are shown. */
  enabled: boolean;
  /** A completion request is in flight. */
  generating: boolean;
  /** The server process could not be started (command not found, crashed), with the reason. */
  startError?: string;
  /** Latest `$/progress` message while loading (e.g. "Loading model 40%"). */
  progress?: string;
}

/** Visual kind, mapped to a theme colour by the extension. */
export type StatusKind = 'normal' | 'busy' | 'warning' | 'error';

export interface StatusView {
  /** Status bar text with codicons, e.g. `$(sync~spin) fastcoder`. */
  text: string;
  /** Multi-line tooltip (markdown-free plain text). */
  tooltip: string;
  kind: StatusKind;
}

/** Format milliseconds for humans: `85 ms`, `1.2 s`; `-` when unknown. */
export function formatMs(ms: number | null | undefined): string {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    return '-';
  }
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** Median of a list of numbers in ms; undefined for an empty list. */
export function median(values: number[] | null | undefined): number | undefined {
  const v = (values ?? []).filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return undefined;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

function lastLatency(status: ServerStatus): number | undefined {
  if (typeof status.lastLatencyMs === 'number') return status.lastLatencyMs;
  const l = status.latencies;
  return Array.isArray(l) && l.length ? l[l.length - 1] : undefined;
}

/** Tooltip lines shared by every state. */
export function tooltipLines(status: ServerStatus | undefined): string[] {
  if (!status) return ['fastcoder: no status from the server yet'];
  const lines = [`state: ${status.state ?? 'unknown'}`];
  if (status.model) lines.push(`model: ${status.model}`);
  if (status.device) lines.push(`device: ${status.device}`);
  if (status.method) lines.push(`method: ${status.method}`);
  lines.push(`last latency: ${formatMs(lastLatency(status))}`);
  const med = median(status.latencies);
  if (med !== undefined) lines.push(`median latency (last ${status.latencies!.length}): ${formatMs(med)}`);
  const mal = status.meanAcceptedLength;
  lines.push(`mean accepted length: ${typeof mal === 'number' && Number.isFinite(mal) ? `${mal.toFixed(2)} tokens/forward` : '-'}`);
  if (status.error) lines.push(`error: ${status.error}`);
  return lines;
}

/**
 * Decide the status bar item for the server status and the client state.
 * Priority: start error > disabled > server error > loading > generating > ready.
 */
export function formatStatus(status: ServerStatus | undefined, client: ClientState): StatusView {
  const clickHint = 'Click for fastcoder commands.';
  if (client.startError) {
    return { text: '$(error) fastcoder', tooltip: `fastcoder server not running: ${client.startError}\n${clickHint}`, kind: 'error' };
  }
  const tip = tooltipLines(status).join('\n');
  if (!client.enabled) {
    return { text: '$(circle-slash) fastcoder', tooltip: `Inline completions off.\n${tip}\n${clickHint}`, kind: 'warning' };
  }
  const state = status?.state;
  if (state === 'error') {
    return { text: '$(error) fastcoder', tooltip: `${tip}\n${clickHint}`, kind: 'error' };
  }
  if (state === 'loading' || status === undefined) {
    const detail = client.progress ?? status?.message ?? 'starting';
    return { text: `$(sync~spin) fastcoder: ${detail}`, tooltip: `${tip}\n${clickHint}`, kind: 'busy' };
  }
  if (client.generating) {
    return { text: '$(loading~spin) fastcoder', tooltip: `Generating...\n${tip}\n${clickHint}`, kind: 'busy' };
  }
  const last = lastLatency(status);
  const suffix = last !== undefined ? ` ${formatMs(last)}` : '';
  return { text: `$(check) fastcoder${suffix}`, tooltip: `${tip}\n${clickHint}`, kind: 'normal' };
}
