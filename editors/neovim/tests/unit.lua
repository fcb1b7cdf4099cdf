-- Unit tests of the plugin's pure helpers (no server). Run by tests/test_neovim.py; writes
-- { checks = [{name, ok, detail}] } to $FASTCODER_NVIM_TEST_RESULT and quits.
local plugin_dir = os.getenv("FASTCODER_NVIM_PLUGIN_DIR")
vim.opt.runtimepath:prepend(plugin_dir)
local checks = {}
local function check(name, ok, detail)
  table.insert(checks, { name = name, ok = ok and true or false, detail = detail and vim.inspect(detail) or "" })
end

local ok, err = pcall(function()
  local fc = require("fastcoder")
  -- resolve_cmd
  check("cmd_table", vim.deep_equal(fc.resolve_cmd({ cmd = { "a", "b" } }), { "a", "b" }))
  check("cmd_string", vim.deep_equal(fc.resolve_cmd({ cmd = "srv" }), { "srv" }))
  check("cmd_python", vim.deep_equal(fc.resolve_cmd({ python = "/py" }), { "/py", "-m", "lsp_server" }))
  local saved_path = vim.env.PATH
  local empty_dir = vim.fn.tempname()
  vim.fn.mkdir(empty_dir, "p")
  vim.cmd("cd " .. vim.fn.fnameescape(empty_dir)) -- no ./.venv here
  vim.env.PATH = "/nonexistent"
  local cmd, msg = fc.resolve_cmd({ cmd = {} })
  vim.env.PATH = saved_path
  check("cmd_missing", cmd == nil and msg:find("fastcoder%-lsp") ~= nil and msg:find("setup") ~= nil, msg)
  -- server_settings drops nil / empty values
  check("settings_clean", vim.deep_equal(fc.server_settings({ model = "", method = "rest", maxNewTokens = 8 }), { method = "rest", maxNewTokens = 8 }))
  -- first_item: list, array, StringValue, empty
  check("first_item_list", fc.first_item({ items = { { insertText = "x = 1" } } }) == "x = 1")
  check("first_item_array", fc.first_item({ { insertText = { kind = "snippet", value = "y" } } }) == "y")
  check("first_item_empty", fc.first_item({ items = {} }) == nil and fc.first_item(vim.NIL) == nil and fc.first_item({ items = { { insertText = "" } } }) == nil)
  -- format_status, both key styles
  local lines = fc.format_status({ state = "ready", model = "m", device = "cpu", method = "fastcoder", latencies_ms = { 10, 31.6 }, mean_accepted_length = 2.5 })
  check("status_snake", lines[1] == "fastcoder: ready" and vim.tbl_contains(lines, "  last latency: 32 ms") and vim.tbl_contains(lines, "  mean accepted length: 2.50 tokens/forward"), lines)
  local lines2 = fc.format_status({ state = "error", lastLatencyMs = 5, meanAcceptedLength = vim.NIL, error = "model not found" })
  check("status_camel_error", vim.tbl_contains(lines2, "  last latency: 5 ms") and vim.tbl_contains(lines2, "  mean accepted length: -") and vim.tbl_contains(lines2, "  error: model not found"), lines2)
  check("status_nil", fc.format_status(nil)[1] == "fastcoder: no status")
  -- insert_at_cursor: multi-line text, cursor after the insertion
  vim.api.nvim_buf_set_lines(0, 0, -1, true, { "x = f()" })
  vim.api.nvim_win_set_cursor(0, { 1, 6 })
  fc.insert_at_cursor(0, "a,\n  b")
  local buf_lines = vim.api.nvim_buf_get_lines(0, 0, -1, true)
  check("insert_multiline", vim.deep_equal(buf_lines, { "x = f(a,", "  b)" }) and vim.deep_equal(vim.api.nvim_win_get_cursor(0), { 2, 3 }), { buf_lines, vim.api.nvim_win_get_cursor(0) })
  vim.api.nvim_win_set_cursor(0, { 2, 1 })
  fc.insert_at_cursor(0, "z")
  check("insert_single", vim.api.nvim_buf_get_lines(0, 1, 2, true)[1] == " z b)" and vim.deep_equal(vim.api.nvim_win_get_cursor(0), { 2, 2 }), vim.api.nvim_buf_get_lines(0, 1, 2, true))
  -- setup() without a server command: false, commands still defined, no error
  vim.env.PATH = "/nonexistent"
  local started = fc.setup({ settings = { maxNewTokens = 8 } })
  vim.env.PATH = saved_path
  check("setup_without_server", started == false and vim.fn.exists(":FastcoderComplete") == 2 and vim.fn.exists(":FastcoderStatus") == 2)
  check("complete_without_client", pcall(fc.complete, { on_done = function() end }))
  -- ghost_still_valid: type-through keeps the ghost, anything else hides it
  local shown = { row = 3, col = 4, line = "    )", texts = { "for x in y:\nmore" } }
  check("ghost_unchanged", fc.ghost_still_valid(shown, { row = 3, col = 4, line = "    )" }, "for x in y:"))
  check("ghost_type_through", fc.ghost_still_valid(shown, { row = 3, col = 7, line = "    for)" }, " x in y:"))
  check("ghost_mismatch", not fc.ghost_still_valid(shown, { row = 3, col = 5, line = "    x)" }, "or x in y:"))
  check("ghost_shown_twice", not fc.ghost_still_valid(shown, { row = 3, col = 5, line = "    f)" }, "for x in y:"))
  check("ghost_deleted", not fc.ghost_still_valid(shown, { row = 3, col = 3, line = "   )" }, "for x in y:"))
  check("ghost_other_line", not fc.ghost_still_valid(shown, { row = 4, col = 4, line = "    )" }, "for x in y:"))
  check("ghost_suffix_changed", not fc.ghost_still_valid(shown, { row = 3, col = 5, line = "    f" }, "or x in y:"))
  check("ghost_none_recorded", not fc.ghost_still_valid(nil, { row = 3, col = 4, line = "    )" }, "x"))
  check("client_flags", fc.client_config({ "srv" }).flags.debounce_text_changes == 0)
  -- version gate
  check("inline_gate", fc.has_inline_completion() == (vim.fn.has("nvim-0.12") == 1))
end)
if not ok then
  check("no_lua_error", false, err)
end
vim.fn.writefile({ vim.fn.json_encode({ checks = checks }) }, os.getenv("FASTCODER_NVIM_TEST_RESULT"))
vim.cmd("qall!")
