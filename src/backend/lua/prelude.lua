-- The sandbox a script runs in, built once per interpreter: what Redis 7.0 gives a script
-- and nothing else. `native` holds holdfast's functions; `G` is the table a script reads
-- its globals from (filled by the caller); the table returned is the globals a script
-- sees: it reads through to `G` and cannot be written, as Redis's read-only globals.
local native, G = ...
local error, type, tostring, tonumber, rawset, rawget = error, type, tostring, tonumber, rawset, rawget
local setmetatable, getmetatable, getfenv, setfenv = setmetatable, getmetatable, getfenv, setfenv
local pcall, xpcall, select, unpack = pcall, xpcall, select, unpack
local loadstring, load = loadstring, load
local find, sub, gsub, byte = string.find, string.sub, string.gsub, string.byte
local resume = coroutine.resume
local stopped, call, oldG = native.stopped, native.call, _G

local READONLY = 'Attempt to modify a readonly table'
-- Proxy -> the table it stands for.
local readonly = setmetatable({}, { __mode = 'k' })

local function protect(real)
  local proxy = {}
  readonly[proxy] = real
  return setmetatable(proxy, {
    __index = real,
    __newindex = function() error(READONLY, 2) end,
    __metatable = false,
  })
end

-- A read-only proxy for `real` that refuses a missing field as Redis refuses a missing
-- global; with its metatable, whose `__index` the globals' switch below changes.
local function strict(real)
  local proxy = {}
  readonly[proxy] = real
  local mt = {
    __index = function(_, k)
      local v = rawget(real, k)
      if v == nil then
        error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
      end
      return v
    end,
    __newindex = function() error(READONLY, 2) end,
    __metatable = false,
  }
  return setmetatable(proxy, mt), mt
end

-- The globals a script sees: `G`, read-only.
local env, env_mt = strict(G)

local function pack(...) return { n = select('#', ...), ... } end

-- An error table as Redis's luaPushErrorBuff makes it: "-CODE msg" keeps its code, any other
-- text gets ERR.
local function pushed(text)
  local code, msg
  if sub(text, 1, 1) == '-' then
    local space = find(text, ' ', 1, true)
    if space then
      code, msg = sub(text, 2, space - 1), sub(text, space + 1)
    else
      code, msg = 'ERR', sub(text, 2)
    end
  else
    code, msg = 'ERR', text
  end
  msg = gsub(gsub(msg, '^[\r\n]+', ''), '[\r\n]+$', '')
  return { err = code .. ' ' .. msg }
end

-- The functions that raise are holdfast's own (no Lua frame between the script and the
-- error, even in `return redis.sha1hex()`), so the error says the script's line.
local redis = {}
redis.call = native.raise
redis.pcall = function(...)
  return (call(...))
end
redis.setresp = native.setresp
redis.sha1hex = native.sha1hex
redis.log = native.log
redis.set_repl = native.set_repl
redis.acl_check_cmd = native.acl_check_cmd
redis.error_reply = function(...)
  local e = ...
  if select('#', ...) ~= 1 or type(e) ~= 'string' then
    return pushed('wrong number or type of arguments')
  end
  if sub(e, 1, 1) ~= '-' then e = '-' .. e end
  return pushed(e)
end
redis.status_reply = function(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then
    return pushed('wrong number or type of arguments')
  end
  return { ok = s }
end
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REDIS_VERSION, redis.REDIS_VERSION_NUM = '7.0.15', 458767

-- pcall as Redis has it: an error table is answered as its text. A stopped script's
-- error is never caught: it goes on to the top.
G.pcall = function(f, ...)
  local result = pack(pcall(f, ...))
  if result[1] then return unpack(result, 1, result.n) end
  local e = native.unraised(result[2])
  if stopped() then error(e, 0) end
  if type(e) == 'table' and type(rawget(e, 'err')) == 'string' then e = rawget(e, 'err') end
  return false, e
end
G.xpcall = function(f, handler)
  local result = pack(xpcall(f, function(e) return handler(native.unraised(e)) end))
  if not result[1] and stopped() then error(result[2], 0) end
  return unpack(result, 1, result.n)
end
local co = {}
for k, v in pairs(coroutine) do co[k] = v end
co.resume = function(...)
  local result = pack(resume(...))
  if not result[1] and stopped() then error(result[2], 0) end
  return unpack(result, 1, result.n)
end

-- What reaches a table behind a proxy is refused as Redis refuses writes to read-only tables
-- (from a C function: no position in the message).
G.rawset = function(t, k, v)
  if readonly[t] then error(READONLY, 0) end
  return rawset(t, k, v)
end
G.rawget = function(t, k)
  local real = readonly[t]
  if real then return rawget(real, k) end
  return rawget(t, k)
end
G.setmetatable = function(t, mt)
  if readonly[t] then error(READONLY, 0) end
  return setmetatable(t, mt)
end
G.getfenv = function(f)
  if f == nil then f = 1 end
  if type(f) == 'number' and f > 0 then f = f + 1 end
  local e = getfenv(f)
  if e == oldG or e == G then return env end
  return e
end
G.setfenv = function(f, t)
  if type(f) == 'number' and f == 0 then error(READONLY, 0) end
  if type(f) == 'number' and f > 0 then f = f + 1 end
  return setfenv(f, t)
end
-- Source text only: a binary chunk can break out of any sandbox.
local function text_only(s)
  return type(s) ~= 'string' or byte(s, 1) ~= 27
end
G.loadstring = function(s, name)
  if not text_only(s) then return nil, 'binary chunks are not allowed' end
  local f, e = loadstring(s, name)
  if f then setfenv(f, env) end
  return f, e
end
G.load = function(fn, name)
  local f, e = load(fn, name)
  if f then setfenv(f, env) end
  return f, e
end

for _, name in ipairs({ 'tostring', 'next', 'assert', 'tonumber', 'rawequal', 'collectgarbage',
                        'getmetatable', 'type', 'select', 'unpack', 'gcinfo', 'pairs', 'ipairs',
                        '_VERSION', 'error', 'newproxy' }) do
  rawset(G, name, oldG[name])
end
for _, name in ipairs({ 'cjson', 'cmsgpack', 'bit', 'struct' }) do
  local lib = rawget(G, name)
  if lib then rawset(G, name, protect(lib)) end
end
G.coroutine = protect(co)
G.string = protect(string)
G.math = protect(math)
G.table = protect(table)
G.redis = protect(redis)
G._G = env
-- Strings' methods come from the same read-only table.
getmetatable('').__index = G.string
getmetatable('').__metatable = false

-- A library's top-level `redis` refuses a missing field as a missing global is refused.
local LOAD = {
  redis = strict({
    register_function = native.register_function,
    log = native.log,
    LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
    REDIS_VERSION = '7.0.15', REDIS_VERSION_NUM = 458767,
  }),
}
-- While a function library loads, the globals are only what Redis gives a library's top
-- level (`redis.register_function`, `redis.log`, the version).
local _, load_mt = strict(LOAD)
local g_index = env_mt.__index
return env, function(loading)
  if loading then env_mt.__index = load_mt.__index else env_mt.__index = g_index end
end
