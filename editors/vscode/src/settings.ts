/**
 * The `fastcoder.*` settings the language server reads (initializationOptions and
 * workspace/didChangeConfiguration section `fastcoder`). Pure: no `vscode` import.
 */

/** Decoding methods the server implements (DESIGN.md: REST, FastCoder, CopySpec, SDSAT, plain AR);
 * the two SDSAT methods need a model made by `fastcoder train-sdsat` (the server says so otherwise). */
export const METHODS = ['fastcoder', 'rest', 'copyspec', 'sdsat', 'fastcoder+sdsat', 'ar'] as const;
export const STOP_AT = ['line', 'block'] as const;
export const DEVICES = ['auto', 'cpu', 'cuda', 'mps'] as const;
export const DTYPES = ['auto', 'float32', 'bfloat16', 'float16'] as const;
/** Where completions come from: the in-server model, or an OpenAI-compatible /v1/completions endpoint. */
export const BACKENDS = ['local', 'openai'] as const;

/** The server's settings object, exactly the keys of the server contract. Absent key = server default. */
export interface FastcoderServerSettings {
  model?: string;
  method?: (typeof METHODS)[number];
  maxNewTokens?: number;
  maxPromptTokens?: number;
  stopAt?: (typeof STOP_AT)[number];
  commonDatastore?: string;
  repoIndex?: boolean;
  exclude?: string[];
  device?: (typeof DEVICES)[number];
  dtype?: (typeof DTYPES)[number];
  temperature?: number;
  tokenHealing?: boolean;
  typeThrough?: boolean;
  warmCache?: boolean;
  warmOnCursor?: boolean;
  deadlineMs?: number;
  maxIncrementalFiles?: number;
  maxFileBytes?: number;
  backend?: (typeof BACKENDS)[number];
  endpoint?: string;
  endpointModel?: string;
  repoId?: string;
}

/** Boolean settings passed through as they are. */
const BOOLEAN_KEYS = ['tokenHealing', 'typeThrough', 'warmCache', 'warmOnCursor'] as const;
/** Non-negative integer settings passed through as they are. */
const INTEGER_KEYS = ['deadlineMs', 'maxIncrementalFiles', 'maxFileBytes'] as const;

/** Reads one key of the `fastcoder` configuration section (e.g. `vscode.WorkspaceConfiguration.get`). */
export type ConfigGetter = (key: string) => unknown;

function oneOf<T extends string>(value: unknown, allowed: readonly T[]): T | undefined {
  return typeof value === 'string' && (allowed as readonly string[]).includes(value) ? (value as T) : undefined;
}

function positiveInt(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : undefined;
}

function nonEmptyString(value: unknown): string | undefined {
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined;
}

/**
 * Build the settings object sent to the server from the user's configuration.
 *
 * Values of the wrong type or out of range are dropped (the server then uses its default), so a
 * typo in settings.json never reaches the server as garbage. An empty `model` is dropped so the
 * server's default or the `FASTCODER_MODEL` environment variable applies.
 */
export function buildServerSettings(get: ConfigGetter): FastcoderServerSettings {
  const out: FastcoderServerSettings = {};
  const model = nonEmptyString(get('model'));
  if (model !== undefined) out.model = model;
  const method = oneOf(get('method'), METHODS);
  if (method !== undefined) out.method = method;
  const maxNewTokens = positiveInt(get('maxNewTokens'));
  if (maxNewTokens !== undefined) out.maxNewTokens = maxNewTokens;
  const maxPromptTokens = positiveInt(get('maxPromptTokens'));
  if (maxPromptTokens !== undefined) out.maxPromptTokens = maxPromptTokens;
  const stopAt = oneOf(get('stopAt'), STOP_AT);
  if (stopAt !== undefined) out.stopAt = stopAt;
  const common = nonEmptyString(get('commonDatastore'));
  if (common !== undefined) out.commonDatastore = common;
  const repoIndex = get('repoIndex');
  if (typeof repoIndex === 'boolean') out.repoIndex = repoIndex;
  const exclude = get('exclude');
  if (Array.isArray(exclude)) out.exclude = exclude.filter((g): g is string => typeof g === 'string' && g !== '');
  const device = oneOf(get('device'), DEVICES);
  if (device !== undefined) out.device = device;
  const dtype = oneOf(get('dtype'), DTYPES);
  if (dtype !== undefined) out.dtype = dtype;
  const temperature = get('temperature');
  if (typeof temperature === 'number' && Number.isFinite(temperature) && temperature >= 0) out.temperature = temperature;
  for (const key of BOOLEAN_KEYS) {
    const value = get(key);
    if (typeof value === 'boolean') out[key] = value;
  }
  for (const key of INTEGER_KEYS) {
    const value = get(key);
    if (typeof value === 'number' && Number.isInteger(value) && value >= 0) out[key] = value;
  }
  const backend = oneOf(get('backend'), BACKENDS);
  if (backend !== undefined) out.backend = backend;
  const endpoint = nonEmptyString(get('endpoint'));
  if (endpoint !== undefined && /^https?:\/\//i.test(endpoint)) out.endpoint = endpoint;
  for (const key of ['endpointModel', 'repoId'] as const) {
    const value = nonEmptyString(get(key));
    if (value !== undefined) out[key] = value;
  }
  return out;
}

/** Setting keys (below `fastcoder.`) whose change needs a server restart rather than a push. */
export const RESTART_KEYS = ['server.command', 'server.pythonPath', 'server.env', 'languages'] as const;

/** Document selector entries for the configured language ids (file and untitled schemes). */
export function documentSelector(languages: unknown): { scheme: string; language: string }[] {
  const ids = Array.isArray(languages) ? languages.filter((l): l is string => typeof l === 'string' && l !== '') : [];
  const use = ids.length ? ids : ['python'];
  return use.flatMap((language) => [
    { scheme: 'file', language },
    { scheme: 'untitled', language },
  ]);
}

/** The `settings` payload of workspace/didChangeConfiguration: `{fastcoder: {...}}`. */
export function configurationPayload(get: ConfigGetter): { fastcoder: FastcoderServerSettings } {
  return { fastcoder: buildServerSettings(get) };
}

/**
 * Extra environment for the server process from `fastcoder.server.env`: string values only,
 * other values dropped. PYTHONUNBUFFERED=1 is always set so logs reach the output channel promptly.
 */
export function serverEnvironment(base: Record<string, string | undefined>, extra: unknown): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) {
    if (typeof v === 'string') env[k] = v;
  }
  if (extra && typeof extra === 'object' && !Array.isArray(extra)) {
    for (const [k, v] of Object.entries(extra as Record<string, unknown>)) {
      if (typeof v === 'string') env[k] = v;
    }
  }
  env.PYTHONUNBUFFERED = '1';
  return env;
}
