-- Headless end-to-end test of the fastcoder Neovim plugin against the real fastcoder-lsp.
-- Run by tests/test_neovim.py:
--   nvim --headless --clean -u NONE -c "luafile editors/neovim/tests/e2e.lua"
-- Reads the JSON config named by $FASTCODER_NVIM_TEST_CONFIG:
--   { plugin_dir, cmd = [...], file, settings = {...}, position = {line, character} (0-based),
--     result_path, ready_timeout_ms }
-- and writes { checks = [{name, ok, detail}], version } to result_path, then quits.
local config = vim.fn.json_decode(table.concat(vim.fn.readfile(os.getenv("FASTCODER_NVIM_TEST_CONFIG")), "\n"))
vim.opt.runtimepath:prepend(config.plugin_dir)

local checks = {}
local function check(name, ok, detail)
  table.insert(checks, { name = name, ok = ok and true or false, detail = detail and tostring(detail) or "" })
end
local function finish()
  local v = vim.version()
  local out = vim.fn.json_encode({ checks = checks, version = string.format("%d.%d.%d", v.major, v.minor, v.patch) })
  vim.fn.writefile({ out }, config.result_path)
  vim.cmd("qall!")
end

local function now_ms()
  return vim.loop.hrtime() / 1e6
end

local function run()
  local fastcoder = require("fastcoder")
  local ok_setup = fastcoder.setup({ cmd = config.cmd, settings = config.settings, cmd_env = config.cmd_env })
  check("setup", ok_setup, "setup() returned " .. tostring(ok_setup))

  vim.cmd("edit " .. vim.fn.fnameescape(config.file))
  local bufnr = vim.api.nvim_get_current_buf()
  local client
  local attached = vim.wait(120000, function() -- importing torch took 41 s on a loaded 2-core machine
    client = fastcoder.get_client(bufnr)
    return client ~= nil and client.initialized == true
  end, 50)
  check("attach", attached, attached and ("client " .. client.id) or "no initialized fastcoder client after 120 s")
  if not attached then
    return
  end
  local caps = client.server_capabilities or {}
  check("inlineCompletionProvider", caps.inlineCompletionProvider ~= nil, vim.inspect(caps.inlineCompletionProvider))

  -- Wait until the model is loaded.
  local status
  local ready = vim.wait(config.ready_timeout_ms or 180000, function()
    status = fastcoder.status(bufnr, 5000)
    return status ~= nil and (status.state == "ready" or status.state == "error")
  end, 250)
  check("ready", ready and status.state == "ready", vim.inspect(status and { state = status.state, error = status.error }))
  if not (ready and status.state == "ready") then
    return
  end
  local lines = fastcoder.format_status(status)
  check("status_format", lines[1] == "fastcoder: ready" and status.model ~= nil, table.concat(lines, " | "))
  local s = status.settings or {}
  check("settings_reached_server", s.max_new_tokens == config.settings.maxNewTokens, vim.inspect(s))

  -- 0. where the cursor rests is prefilled: the plugin sends fastcoder/cursor, the server counts a warm prefill.
  local function warm_prefills()
    local st = fastcoder.status(bufnr, 5000) or {}
    return (st.counters or {}).warm_prefills or 0
  end
  vim.wait(300, function() return false end)
  local before = warm_prefills()
  local rest = vim.api.nvim_buf_line_count(bufnr)
  vim.api.nvim_win_set_cursor(0, { rest, 0 })
  vim.api.nvim_exec_autocmds("CursorMoved", { buffer = bufnr })
  local warmed = vim.wait(15000, function() return warm_prefills() > before end, 100)
  check("cursor_warms", warmed, string.format("warm prefills %d -> %d", before, warm_prefills()))

  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = config.position,
    context = { triggerKind = 1 },
  }

  -- 1. request_sync: a real completion.
  local t0 = now_ms()
  local resp, err = client.request_sync("textDocument/inlineCompletion", params, 30000, bufnr)
  local ms = now_ms() - t0
  local text = resp and not resp.err and fastcoder.first_item(resp.result)
  check(
    "request_sync_completion",
    text ~= nil and text:match("%S") ~= nil,
    string.format("%.0f ms: %s", ms, vim.inspect(resp and (resp.err or resp.result) or err))
  )

  -- 2. cancel-previous: two quick requests for the same buffer, no $/cancelRequest from the client. Code added
  -- above first makes the prompt cold: the first request's prefill (hundreds of tokens) is still running when
  -- the second arrives. (A warm repeat of the request above is answered in ~20 ms, sometimes before the
  -- server reads the second request: then there is nothing to cancel.)
  local added = {}
  for i = 1, 40 do
    vim.list_extend(added, { string.format("def helper_%d(value):", i), string.format("    return value + %d", i), "", "" })
  end
  vim.api.nvim_buf_set_lines(bufnr, 0, 0, true, added)
  local shifted = vim.deepcopy(params)
  shifted.position = { line = config.position.line + #added, character = config.position.character }
  local replies = {}
  local t1 = now_ms()
  for i = 1, 2 do
    client.request("textDocument/inlineCompletion", shifted, function(e, result)
      replies[i] = { err = e, text = fastcoder.first_item(result), ms = now_ms() - t1 }
    end, bufnr)
  end
  local both = vim.wait(30000, function()
    return replies[1] ~= nil and replies[2] ~= nil
  end, 10)
  vim.api.nvim_buf_set_lines(bufnr, 0, #added, true, {})
  local first, second = replies[1] or {}, replies[2] or {}
  local first_cancelled = (first.err ~= nil and first.err.code == -32800) or (first.err == nil and first.text == nil)
  check(
    "cancel_previous",
    both and first_cancelled and second.err == nil and second.text ~= nil and first.ms <= second.ms,
    vim.inspect({ first = first, second = second })
  )

  -- 3. The plugin's manual trigger inserts the first item at the cursor.
  -- The position may be at the end of the line: let the normal-mode cursor stand there, as in insert mode.
  vim.opt.virtualedit = "onemore"
  local row, col = config.position.line + 1, config.position.character
  vim.api.nvim_win_set_cursor(0, { row, col })
  local line_before = vim.api.nvim_buf_get_lines(bufnr, row - 1, row, true)[1]
  local outcome
  fastcoder.complete({
    bufnr = bufnr,
    on_done = function(e, t)
      outcome = { err = e, text = t }
    end,
  })
  vim.wait(30000, function()
    return outcome ~= nil
  end, 10)
  local inserted = outcome and outcome.text
  local ok_insert = false
  local detail = vim.inspect(outcome)
  if inserted then
    local new_lines = vim.api.nvim_buf_get_lines(bufnr, row - 1, row - 1 + #vim.split(inserted, "\n", { plain = true }), true)
    local expected = line_before:sub(1, col) .. inserted .. line_before:sub(col + 1)
    ok_insert = table.concat(new_lines, "\n") == expected
    local cur = vim.api.nvim_win_get_cursor(0)
    detail = vim.inspect({ expected = expected, got = new_lines, cursor = cur })
  end
  check("manual_complete_inserts", ok_insert, detail)
  check("manual_complete_equals_request_sync", inserted ~= nil and inserted == text, vim.inspect({ inserted, text }))
end

local ok, err = pcall(run)
if not ok then
  check("no_lua_error", false, err)
end
finish()
