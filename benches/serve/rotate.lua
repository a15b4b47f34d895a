-- wrk script: POST the JSON body in $BODY to /v1/packages/<prefix>-<i>/call for i = 1 … $PACKAGES
-- in turn, each of wrk's connections starting at a different package.
local packages = tonumber(os.getenv("PACKAGES"))
local prefix = os.getenv("PREFIX")
local body = os.getenv("BODY")
local counter = 0

function setup(thread)
  thread:set("offset", counter)
  counter = counter + 1
end

local next_package = nil

function request()
  if next_package == nil then next_package = (offset or 0) % packages end
  next_package = next_package % packages + 1
  return wrk.format("POST", "/v1/packages/" .. prefix .. "-" .. next_package .. "/call",
    {["Content-Type"] = "application/json"}, body)
end
