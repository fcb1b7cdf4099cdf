--- fastcoder.ghost: what Neovim 0.12's inline completion client lacks (see the header of fastcoder/init.lua).
---
--- A keystroke cancels the fastcoder requests still pending for the buffer ($/cancelRequest), an answer
--- made for an older text or cursor reaches the client as an empty list, and a ghost text is hidden at
--- once unless the user typed a prefix of it (type-through). require("fastcoder") re-exports every
--- function here (fastcoder.guard_client, .check_ghost, .ghost_stats, ...).
local G = {}

local INLINE = "textDocument/inlineCompletion"
--- Per buffer: pending = { [request_id] = client }, shown = the state the last answer was made for.
local ghost_state = {}

local function buf_state(bufnr)
  ghost_state[bufnr] = ghost_state[bufnr] or { pending = {} }
  return ghost_state[bufnr]
end

--- The namespace of vim.lsp.inline_completion's ghost text extmarks.
function G.ghost_namespace()
  return vim.api.nvim_create_namespace("nvim.lsp.inline_completion")
end

--- The ghost text shown in bufnr: (first line of the text, extmark) or nil.
function G.visible_ghost(bufnr)
  local marks = vim.api.nvim_buf_get_extmarks(bufnr, G.ghost_namespace(), 0, -1, { details = true, limit = 1 })
  local mark = marks[1]
  if not mark then
    return nil
  end
  local chunks = mark[4].virt_text or {}
  return (chunks[1] and chunks[1][1] or ""), mark
end

local function cursor_of(bufnr)
  local win = vim.fn.bufwinid(bufnr)
  if win == -1 then
    return nil
  end
  local cur = vim.api.nvim_win_get_cursor(win)
  return { cur[1] - 1, cur[2] } -- 0-based row, byte column
end

--- Whether a ghost text still fits the buffer (pure; used by G.check_ghost).
--- shown: { row, col (0-based byte), line (the cursor line when the answer came), texts (items) };
--- now: { row, col, line } of the cursor; ghost: the first line of the text on screen.
--- True when the user typed on at the answer's position a prefix of one of the items and the screen
--- shows the rest of that item's first line (or its end), not the text typed through once more.
function G.ghost_still_valid(shown, now, ghost)
  if not shown or now.row ~= shown.row or now.col < shown.col then
    return false
  end
  local line = now.line
  if line:sub(1, shown.col) ~= shown.line:sub(1, shown.col) then
    return false
  end
  local after = shown.line:sub(shown.col + 1) -- the text right of the cursor when the answer came
  if line:sub(now.col + 1) ~= after then
    return false
  end
  local typed = line:sub(shown.col + 1, now.col)
  for _, text in ipairs(shown.texts or {}) do
    local first = vim.split(text, "\n", { plain = true })[1]
    local rest = first:sub(#typed + 1)
    -- the screen shows the rest, or its end when the client skipped text already right of the cursor
    if first:sub(1, #typed) == typed and (ghost == nil or (#ghost <= #rest and rest:sub(#rest - #ghost + 1) == ghost)) then
      return true
    end
  end
  return false
end

--- Texts of an inline completion result (InlineCompletionList or InlineCompletionItem[]).
local function item_texts(result)
  local texts = {}
  for _, item in ipairs(type(result) == "table" and (result.items or result) or {}) do
    local text = type(item) == "table" and item.insertText or nil
    if type(text) == "table" then
      text = text.value
    end
    if type(text) == "string" then
      table.insert(texts, text)
    end
  end
  return texts
end

--- Wrap client.request for textDocument/inlineCompletion (0.12+): remember pending requests per
--- buffer (for G.cancel_pending), and turn an answer that came after the buffer's text or cursor
--- changed into an empty list, so that vim.lsp.inline_completion hides instead of showing it.
function G.guard_client(client)
  if client._fastcoder_guarded then
    return
  end
  client._fastcoder_guarded = true
  local request = client.request
  client.request = function(self, method, params, handler, bufnr)
    if method ~= INLINE or type(handler) ~= "function" then
      return request(self, method, params, handler, bufnr)
    end
    local buf = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
    local tick = vim.api.nvim_buf_get_changedtick(buf)
    local cursor = cursor_of(buf)
    local state = buf_state(buf)
    local id
    local client_id = self.id
    local ok, rid = request(self, method, params, function(err, result, ctx)
      if id then
        state.pending[id] = nil
      end
      if not err and vim.api.nvim_buf_is_valid(buf) then
        local now = cursor_of(buf)
        if vim.api.nvim_buf_get_changedtick(buf) ~= tick or not vim.deep_equal(now, cursor) then
          state.stale_answers = (state.stale_answers or 0) + 1
          result = { items = {} } -- made for an older text: never shown
        elseif now then
          local line = vim.api.nvim_buf_get_lines(buf, now[1], now[1] + 1, false)[1] or ""
          state.shown = { row = now[1], col = now[2], line = line, texts = item_texts(result), tick = tick }
          -- G.check_ghost empties this client's items in vim.lsp.inline_completion through the
          -- same handler once they no longer fit (else the next CursorMovedI, or another
          -- client's answer, would show them again)
          state.clear = function()
            handler(nil, { items = {} }, { method = INLINE, client_id = client_id, bufnr = buf })
          end
        end
      end
      return handler(err, result, ctx)
    end, bufnr)
    if ok and rid then
      id = rid
      state.pending[rid] = self
    end
    return ok, rid
  end
end

--- Send $/cancelRequest for the inline completions still pending for bufnr. Returns how many.
function G.cancel_pending(bufnr)
  local state = buf_state(bufnr)
  local n = 0
  for id, client in pairs(state.pending) do
    state.pending[id] = nil
    if not client:is_stopped() then
      client:cancel_request(id)
      n = n + 1
    end
  end
  state.cancelled = (state.cancelled or 0) + n
  return n
end

--- Once the text or cursor changed so that fastcoder's last answer no longer fits (anything but
--- typing a prefix of it, G.ghost_still_valid), empty fastcoder's items in vim.lsp.inline_completion,
--- which hides its ghost text. Returns true when it did.
function G.check_ghost(bufnr)
  local state = buf_state(bufnr)
  local shown = state.shown
  if not shown then
    return false
  end
  local cur = cursor_of(bufnr)
  if cur and shown.tick == vim.api.nvim_buf_get_changedtick(bufnr) and shown.row == cur[1] and shown.col == cur[2] then
    return false -- nothing changed since the answer
  end
  local now = cur and {
    row = cur[1],
    col = cur[2],
    line = vim.api.nvim_buf_get_lines(bufnr, cur[1], cur[1] + 1, false)[1] or "",
  }
  if now and G.ghost_still_valid(shown, now) then
    return false
  end
  state.shown = nil
  local clear = state.clear
  state.clear = nil
  if not (clear and pcall(clear)) then
    vim.api.nvim_buf_clear_namespace(bufnr, G.ghost_namespace(), 0, -1)
  end
  state.hidden = (state.hidden or 0) + 1
  return true
end

--- Counters of this plugin for bufnr: cancelled requests, stale answers, ghost texts hidden.
function G.ghost_stats(bufnr)
  local state = buf_state((bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr)
  return { cancelled = state.cancelled or 0, stale_answers = state.stale_answers or 0, hidden = state.hidden or 0 }
end

--- Buffer-local autocmds of the guard (0.12+): a keystroke cancels the pending requests and hides a ghost text
--- that no longer fits; leaving insert mode cancels; unloading the buffer drops its state.
function G.setup_guard(bufnr, client)
  G.guard_client(client)
  local group = vim.api.nvim_create_augroup("fastcoder_ghost_" .. bufnr, { clear = true })
  -- Defined before vim.lsp.inline_completion is enabled for the buffer, so that this CursorMovedI
  -- handler runs before the client's own, which redraws its last item at that item's position: after
  -- a deletion (e.g. CTRL-U) that position can lie beyond the end of the line, and Neovim
  -- v0.12.0-dev then fails with "Invalid 'col': out of range" on every keystroke. TextChangedI
  -- (always after CursorMovedI) checks again in case the client's handler came first.
  vim.api.nvim_create_autocmd({ "CursorMovedI", "TextChangedI" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      G.cancel_pending(bufnr)
      G.check_ghost(bufnr)
    end,
  })
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufUnload" }, {
    group = group,
    buffer = bufnr,
    callback = function(args)
      G.cancel_pending(bufnr)
      if args.event == "BufUnload" then
        ghost_state[bufnr] = nil
      end
    end,
  })
end

return G
