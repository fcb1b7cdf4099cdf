--- fastcoder: inline completions from a local code LLM (fastcoder-lsp) in Neovim.
---
--- require("fastcoder").setup({...}) starts fastcoder-lsp for the configured filetypes:
---   * Neovim >= 0.11: vim.lsp.config("fastcoder", ...) + vim.lsp.enable("fastcoder");
---   * Neovim 0.8-0.10: vim.lsp.start() from a FileType autocmd;
---   * Neovim 0.7: vim.lsp.start_client() + vim.lsp.buf_attach_client().
--- On Neovim >= 0.12 it turns on the built-in vim.lsp.inline_completion (ghost text) with Tab to
--- accept (falling back to a normal Tab) and M-] / M-[ to cycle. Older versions get a manual trigger,
--- :FastcoderComplete (and an optional insert-mode key), which sends textDocument/inlineCompletion
--- and inserts the first item. :FastcoderStatus shows fastcoder/status.
---
--- Neovim 0.12's inline completion client neither cancels an in-flight request when the user types
--- on nor checks that an answer still fits the text, and on every cursor move it redraws the last
--- item at the cursor (after typing "x" over the ghost "for ..." it showed "or ..."). The plugin
--- adds what is missing (fastcoder/ghost.lua: M.guard_client, M.check_ghost): a keystroke cancels
--- the fastcoder requests still pending for the buffer ($/cancelRequest), an answer for an older
--- text or cursor reaches the client as an empty list, and a ghost text is hidden at once unless
--- the user typed a prefix of it (type-through). didChange is sent without debounce so that the
--- server sees each keystroke before the cancel (it keeps a running completion the user is typing
--- through). The server also cancels the previous request for the same document itself
--- (cancel-previous).
local M = {}
local uv = vim.uv or vim.loop
local ghost = require("fastcoder.ghost")

-- the ghost-text guard's functions, part of this module's API (fastcoder/ghost.lua)
for _, name in ipairs({ "ghost_namespace", "visible_ghost", "ghost_still_valid", "guard_client", "cancel_pending",
  "check_ghost", "ghost_stats" }) do
  M[name] = ghost[name]
end

M.name = "fastcoder"

--- Defaults; every key can be overridden in setup().
M.defaults = {
  -- Command that starts the server over stdio. nil: auto-detect (see M.resolve_cmd).
  cmd = nil,
  -- Python with fastcoder installed; used as { python, "-m", "lsp_server" } when cmd is nil.
  python = nil,
  -- Extra environment for the server, e.g. { FASTCODER_MODEL = "/models/qwen2.5-coder-1.5b" }.
  cmd_env = nil,
  filetypes = { "python" },
  root_markers = { ".git", "pyproject.toml", "setup.py", "setup.cfg" },
  -- Server settings (section "fastcoder"); nil values use the server's defaults. Keys as in the
  -- server contract: model, method, maxNewTokens, maxPromptTokens, stopAt, commonDatastore,
  -- repoIndex, exclude, device, dtype, temperature.
  settings = {},
  -- Insert-mode keys; set a key to false to leave it unmapped.
  keys = {
    accept = "<Tab>", -- 0.12+: accept the ghost text, else a normal <Tab>
    next = "<M-]>", -- 0.12+: next candidate
    prev = "<M-[>", -- 0.12+: previous candidate
    trigger = "<M-\\>", -- < 0.12: request a completion and insert it
  },
  -- Turn on vim.lsp.inline_completion automatically (0.12+).
  auto_enable = true,
  -- Timeout of :FastcoderStatus (ms).
  status_timeout_ms = 3000,
}

M.config = vim.deepcopy(M.defaults)

local function has(version)
  return vim.fn.has("nvim-" .. version) == 1
end

--- True when Neovim has the built-in inline completion client (0.12+).
function M.has_inline_completion()
  return vim.lsp.inline_completion ~= nil and vim.lsp.inline_completion.enable ~= nil
end

local function notify(msg, level)
  vim.notify("fastcoder: " .. msg, level or vim.log.levels.INFO)
end

--- Method-call helpers: 0.11+ uses client:request(), older versions client.request().
local function client_request(client, method, params, handler, bufnr)
  if has("0.11") then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

local function client_notify(client, method, params)
  if has("0.11") then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

local function is_executable(path)
  return path ~= nil and path ~= "" and vim.fn.executable(path) == 1
end

--- The server command: opts.cmd, else { opts.python, "-m", "lsp_server" }, else
--- <cwd>/.venv/bin/fastcoder-lsp, else fastcoder-lsp on PATH.
--- @return string[]|nil cmd, string|nil error message naming the option to set
function M.resolve_cmd(opts)
  opts = opts or M.config
  if type(opts.cmd) == "string" and opts.cmd ~= "" then
    return { opts.cmd }
  elseif type(opts.cmd) == "table" and #opts.cmd > 0 then
    return opts.cmd
  end
  if type(opts.python) == "string" and opts.python ~= "" then
    return { vim.fn.expand(opts.python), "-m", "lsp_server" }
  end
  local venv = vim.fn.getcwd() .. "/.venv/bin/fastcoder-lsp"
  if is_executable(venv) then
    return { venv }
  end
  if is_executable("fastcoder-lsp") then
    return { "fastcoder-lsp" }
  end
  return nil,
    "cannot find the fastcoder language server (fastcoder-lsp) in ./.venv/bin or on PATH; "
      .. "install it (pip install fastcoder) or pass cmd = {...} or python = '/path/to/python' to "
      .. "require('fastcoder').setup()"
end

--- Server settings without nil/empty values (the server uses its defaults for missing keys).
function M.server_settings(settings)
  local out = {}
  for k, v in pairs(settings or {}) do
    if v ~= nil and v ~= vim.NIL and v ~= "" then
      out[k] = v
    end
  end
  return out
end

local function root_dir_for(bufnr, markers)
  local name = vim.api.nvim_buf_get_name(bufnr)
  local start = name ~= "" and vim.fn.fnamemodify(name, ":p:h") or vim.fn.getcwd()
  if vim.fs and vim.fs.find then
    local found = vim.fs.find(markers, { upward = true, path = start })[1]
    if found then
      return vim.fs.dirname(found)
    end
  else
    for _, marker in ipairs(markers) do
      local hit = vim.fn.findfile(marker, start .. ";")
      if hit == "" then
        hit = vim.fn.finddir(marker, start .. ";")
      end
      if hit ~= "" then
        return vim.fn.fnamemodify(hit, ":p:h:h")
      end
    end
  end
  return vim.fn.getcwd()
end

--- Push settings with workspace/didChangeConfiguration (0.7 never pushes `settings` itself).
local function on_init(client)
  local settings = M.server_settings(M.config.settings)
  client_notify(client, "workspace/didChangeConfiguration", { settings = { fastcoder = settings } })
  return true
end

--- The client config shared by every Neovim version.
function M.client_config(cmd)
  local settings = M.server_settings(M.config.settings)
  return {
    name = M.name,
    cmd = cmd,
    cmd_env = M.config.cmd_env,
    filetypes = M.config.filetypes,
    root_markers = M.config.root_markers,
    init_options = settings,
    settings = { fastcoder = settings },
    on_init = on_init,
    -- didChange at once (default 150 ms): the server cancels or types through its running
    -- completion on each keystroke, and a $/cancelRequest must not overtake the change it follows.
    flags = { debounce_text_changes = 0 },
  }
end

--- The fastcoder client attached to bufnr (or any fastcoder client when bufnr is nil), or nil.
function M.get_client(bufnr)
  local clients
  if vim.lsp.get_clients then
    clients = vim.lsp.get_clients({ name = M.name, bufnr = bufnr })
  else
    clients = bufnr and vim.lsp.buf_get_clients(bufnr) or vim.lsp.get_active_clients()
  end
  for _, client in pairs(clients or {}) do
    if client.name == M.name and not (client.is_stopped and client.is_stopped(client)) then
      return client
    end
  end
  return nil
end

-- ---------------------------------------------------------------------------------------------
-- Manual completion (all versions): textDocument/inlineCompletion, insert the first item.

local function position_params(bufnr, client)
  local win = vim.api.nvim_get_current_win()
  local params
  if has("0.11") then
    params = vim.lsp.util.make_position_params(win, client.offset_encoding or "utf-16")
  else
    params = vim.lsp.util.make_position_params(win, client.offset_encoding)
  end
  params.textDocument = { uri = vim.uri_from_bufnr(bufnr) }
  params.context = { triggerKind = 1 } -- Invoked
  return params
end

--- First item's text from an InlineCompletionList or InlineCompletionItem[] (nil when none).
--- @return string|nil text, table|nil item
function M.first_item(result)
  if type(result) ~= "table" then
    return nil
  end
  local list = result.items or result
  local item = type(list) == "table" and list[1] or nil
  if type(item) ~= "table" then
    return nil
  end
  local text = item.insertText
  if type(text) == "table" then
    text = text.value
  end
  if type(text) ~= "string" or text == "" then
    return nil
  end
  return text, item
end

--- Insert `text` at the (1-based row, 0-based byte col) cursor and move the cursor after it.
function M.insert_at_cursor(bufnr, text)
  local win = vim.api.nvim_get_current_win()
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  local lines = vim.split(text, "\n", { plain = true })
  vim.api.nvim_buf_set_text(bufnr, row - 1, col, row - 1, col, lines)
  local last_row = row + #lines - 1
  local last_col = (#lines == 1 and col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(win, { last_row, last_col })
end

--- Request a completion at the cursor and insert the first item.
--- opts.insert (default true): insert the text; opts.on_done(err, text, result): called with the
--- outcome (text nil when there is no completion). A response for an outdated buffer (changedtick
--- or cursor moved) is not inserted.
function M.complete(opts)
  opts = opts or {}
  local bufnr = opts.bufnr or vim.api.nvim_get_current_buf()
  local client = M.get_client(bufnr)
  local function done(err, text, result)
    if opts.on_done then
      opts.on_done(err, text, result)
    end
  end
  if not client then
    local msg = "no fastcoder server attached to this buffer (see :FastcoderStatus, :LspInfo)"
    notify(msg, vim.log.levels.WARN)
    return done(msg)
  end
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local cursor = vim.api.nvim_win_get_cursor(0)
  local started = uv.hrtime()
  client_request(client, "textDocument/inlineCompletion", position_params(bufnr, client), function(err, result)
    local ms = (uv.hrtime() - started) / 1e6
    if err then
      if err.code ~= -32800 then
        notify("completion failed: " .. (err.message or vim.inspect(err)), vim.log.levels.WARN)
      end
      return done(err)
    end
    local text = M.first_item(result)
    if not text then
      if opts.verbose ~= false then
        notify(string.format("no completion (%.0f ms)", ms))
      end
      return done(nil, nil, result)
    end
    local same_place = vim.api.nvim_buf_is_valid(bufnr)
      and vim.api.nvim_buf_get_changedtick(bufnr) == tick
      and vim.api.nvim_get_current_buf() == bufnr
      and vim.deep_equal(vim.api.nvim_win_get_cursor(0), cursor)
    if opts.insert ~= false and same_place then
      M.insert_at_cursor(bufnr, text)
    end
    return done(nil, text, result)
  end, bufnr)
end

-- ---------------------------------------------------------------------------------------------
-- Status

--- Human-readable lines for a fastcoder/status result (camelCase or snake_case keys).
function M.format_status(status)
  if type(status) ~= "table" then
    return { "fastcoder: no status" }
  end
  local function val(...)
    for _, k in ipairs({ ... }) do
      local v = status[k]
      if v ~= nil and v ~= vim.NIL then
        return v
      end
    end
    return nil
  end
  local latencies = val("latencies", "latencies_ms")
  local last = val("lastLatencyMs", "last_latency_ms")
  if last == nil and type(latencies) == "table" and #latencies > 0 then
    last = latencies[#latencies]
  end
  local mal = val("meanAcceptedLength", "mean_accepted_length")
  local lines = {
    "fastcoder: " .. tostring(val("state") or "unknown"),
    "  model: " .. tostring(val("model") or "-"),
    "  device: " .. tostring(val("device") or "-"),
    "  method: " .. tostring(val("method") or "-"),
    "  last latency: " .. (type(last) == "number" and string.format("%.0f ms", last) or "-"),
    "  mean accepted length: " .. (type(mal) == "number" and string.format("%.2f tokens/forward", mal) or "-"),
  }
  local err = val("error")
  if err then
    table.insert(lines, "  error: " .. tostring(err))
  end
  return lines
end

--- Fetch fastcoder/status synchronously. Returns (status, nil) or (nil, error message).
function M.status(bufnr, timeout_ms)
  local client = M.get_client(bufnr) or M.get_client(nil)
  if not client then
    return nil, "not running (no fastcoder client; check :LspInfo and the cmd in setup())"
  end
  local timeout = timeout_ms or M.config.status_timeout_ms
  local resp, err
  if has("0.11") then
    resp, err = client:request_sync("fastcoder/status", {}, timeout, bufnr or 0)
  else
    resp, err = client.request_sync("fastcoder/status", {}, timeout, bufnr or 0)
  end
  if not resp then
    return nil, "fastcoder/status failed: " .. tostring(err)
  end
  if resp.err then
    return nil, "fastcoder/status failed: " .. (resp.err.message or vim.inspect(resp.err))
  end
  return resp.result, nil
end

local function show_status()
  local status, err = M.status(vim.api.nvim_get_current_buf())
  if not status then
    notify(err, vim.log.levels.WARN)
    return
  end
  local level = status.state == "error" and vim.log.levels.ERROR or vim.log.levels.INFO
  vim.notify(table.concat(M.format_status(status), "\n"), level)
end

-- ---------------------------------------------------------------------------------------------
-- Where the cursor rests

M.CURSOR_METHOD = "fastcoder/cursor"
--- Milliseconds the cursor must stay put before its position is sent (lsp_server/bench_latency.py CURSOR_REST_S).
M.CURSOR_REST_MS = 150

--- Tell the server where the cursor comes to rest (`fastcoder/cursor`), so that it prefills the prompt there
--- before the first keystroke: a jump to another function otherwise makes the first request after it prefill
--- ~900 cold prompt tokens. Debounced; the same place is sent again only after an edit. The server ignores it
--- when its setting warmOnCursor is false.
local cursor_timers = {} -- bufnr -> its debounce timer (closed when the buffer is attached again)

local function close_timer(timer)
  timer:stop()
  if not timer:is_closing() then
    timer:close()
  end
end

local function setup_cursor_report(bufnr, client)
  if cursor_timers[bufnr] then
    close_timer(cursor_timers[bufnr])
  end
  local timer = uv.new_timer()
  cursor_timers[bufnr] = timer
  local last = nil
  local group = vim.api.nvim_create_augroup("fastcoder_cursor_" .. bufnr, { clear = true })
  local function send()
    if not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_get_current_buf() ~= bufnr then
      return
    end
    if client.is_stopped and client.is_stopped(client) then
      return
    end
    local params = position_params(bufnr, client)
    params.context = nil
    local key = string.format("%d:%d:%d", vim.api.nvim_buf_get_changedtick(bufnr), params.position.line,
      params.position.character)
    if key == last then
      return
    end
    last = key
    pcall(client_notify, client, M.CURSOR_METHOD, params)
  end
  vim.api.nvim_create_autocmd({ "CursorMoved", "CursorMovedI" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      timer:stop()
      timer:start(M.CURSOR_REST_MS, 0, vim.schedule_wrap(send))
    end,
  })
  vim.api.nvim_create_autocmd(has("0.8") and { "BufUnload", "LspDetach" } or { "BufUnload" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      close_timer(timer)
      if cursor_timers[bufnr] == timer then
        cursor_timers[bufnr] = nil
      end
      pcall(vim.api.nvim_del_augroup_by_id, group)
    end,
  })
end

-- ---------------------------------------------------------------------------------------------
-- Keymaps and attach

local function map(mode, lhs, rhs, opts)
  if lhs and lhs ~= "" then
    vim.keymap.set(mode, lhs, rhs, opts)
  end
end

--- Buffer-local setup once the fastcoder client is attached to bufnr.
function M.on_attach(bufnr, client)
  local keys = M.config.keys or {}
  if client then
    setup_cursor_report(bufnr, client)
  end
  if M.has_inline_completion() then
    if client then
      ghost.setup_guard(bufnr, client) -- before enable(): see ghost.setup_guard
    end
    if M.config.auto_enable then
      vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
    end
    -- The keys act on the ghost text on screen only (a hidden stale item is never accepted).
    local accept = keys.accept
    map("i", accept, function()
      if M.visible_ghost(bufnr) == nil or not vim.lsp.inline_completion.get() then
        return accept
      end
      return ""
    end, { expr = true, buffer = bufnr, desc = "fastcoder: accept inline completion" })
    map("i", keys.next, function()
      if M.visible_ghost(bufnr) ~= nil then
        vim.lsp.inline_completion.select({ count = 1 })
      end
    end, { buffer = bufnr, desc = "fastcoder: next inline completion" })
    map("i", keys.prev, function()
      if M.visible_ghost(bufnr) ~= nil then
        vim.lsp.inline_completion.select({ count = -1 })
      end
    end, { buffer = bufnr, desc = "fastcoder: previous inline completion" })
  else
    map("i", keys.trigger, function()
      M.complete({ bufnr = bufnr })
    end, { buffer = bufnr, desc = "fastcoder: complete at cursor" })
  end
end

local function setup_attach_autocmd(group)
  if has("0.8") then
    vim.api.nvim_create_autocmd("LspAttach", {
      group = group,
      callback = function(args)
        local client = vim.lsp.get_client_by_id(args.data.client_id)
        if client and client.name == M.name then
          M.on_attach(args.buf, client)
        end
      end,
    })
  end
end

--- Start (or reuse) the client for bufnr on Neovim 0.7-0.10.
local legacy_client_id = nil
local function start_legacy(bufnr, cmd)
  local config = M.client_config(cmd)
  config.root_dir = root_dir_for(bufnr, M.config.root_markers)
  if vim.lsp.start then -- 0.8-0.10: reuses a client with the same name and root_dir
    vim.lsp.start(config, { bufnr = bufnr })
    return
  end
  -- 0.7
  local client = legacy_client_id and vim.lsp.get_client_by_id(legacy_client_id)
  if not client or client.is_stopped(client) then
    config.on_attach = function(client, buf)
      M.on_attach(buf, client)
    end
    legacy_client_id = vim.lsp.start_client(config)
  end
  if legacy_client_id then
    vim.lsp.buf_attach_client(bufnr, legacy_client_id)
  end
end

local warned_old = false
local function warn_old_version_once()
  if warned_old or M.has_inline_completion() then
    return
  end
  warned_old = true
  notify(
    "automatic ghost text needs Neovim >= 0.12 (vim.lsp.inline_completion); "
      .. "use :FastcoderComplete"
      .. (M.config.keys and M.config.keys.trigger and (" or " .. M.config.keys.trigger .. " in insert mode") or "")
      .. " to insert a completion",
    vim.log.levels.INFO
  )
end

--- Configure and start fastcoder-lsp. See M.defaults for the options.
function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  if opts and opts.filetypes then
    M.config.filetypes = opts.filetypes -- lists replace, not merge
  end
  local cmd, err = M.resolve_cmd(M.config)
  local group = vim.api.nvim_create_augroup("fastcoder", { clear = true })

  vim.api.nvim_create_user_command("FastcoderComplete", function()
    M.complete({})
  end, { desc = "fastcoder: request an inline completion at the cursor and insert it" })
  vim.api.nvim_create_user_command("FastcoderStatus", show_status, { desc = "fastcoder: show fastcoder/status" })
  vim.api.nvim_create_user_command("FastcoderToggle", function()
    if not M.has_inline_completion() then
      notify("inline completion needs Neovim >= 0.12", vim.log.levels.WARN)
      return
    end
    local on = vim.lsp.inline_completion.is_enabled()
    vim.lsp.inline_completion.enable(not on)
    notify("inline completions " .. (on and "off" or "on"))
  end, { desc = "fastcoder: toggle inline completions (0.12+)" })

  if not cmd then
    notify(err, vim.log.levels.ERROR)
    return false
  end
  setup_attach_autocmd(group)

  if vim.lsp.config and vim.lsp.enable then -- 0.11+
    vim.lsp.config(M.name, M.client_config(cmd))
    vim.lsp.enable(M.name)
  else
    vim.api.nvim_create_autocmd("FileType", {
      group = group,
      pattern = M.config.filetypes,
      callback = function(args)
        start_legacy(args.buf, cmd)
      end,
    })
  end
  if #vim.api.nvim_list_uis() > 0 then
    vim.schedule(warn_old_version_once)
  end
  return true
end

return M
