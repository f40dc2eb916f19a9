--[[
gpucast job_submit plugin for Slurm (job_submit/lua).

Sizes a job's GPU request from gpucast's prediction: the job names a gpucast job spec, the plugin
runs `gpucast slurm SPEC --json` on the slurmctld host and sets the job's GRES request to the
share gpucast predicts (`gres/shard:N`, `gres/mps:N`, or `gres/gpu:G` for a job that needs whole
GPUs). Only jobs that opt in are touched; the others pass unchanged.

Install: copy this file as `job_submit.lua` next to slurm.conf, set `JobSubmitPlugins=lua`, and
edit `config` below (the gpucast command must be on slurmctld's host, runnable by SlurmUser,
and the job spec files readable there). The installed copy of this file is at
`python -c "from gpucast.integrations.slurm import lua_plugin_path; print(lua_plugin_path())"`.

How a job opts in (fields Slurm's job_submit/lua exposes, src/plugins/job_submit/lua/
job_submit_lua.c: `comment` and, for batch jobs, `environment`):
  * the job comment:      sbatch --comment='gpucast:/shared/jobs/resnet.yaml' train.sh
                          sbatch --comment='gpucast@h100:/shared/jobs/resnet.yaml' train.sh
                          sbatch --comment='gpucast:{"model":"mlp-small","batch_size":32}' train.sh
  * or the environment of a batch job:
                          GPUCAST_JOB=/shared/jobs/resnet.yaml [GPUCAST_GPU=h100] sbatch train.sh
A relative spec path is taken from the job's working directory (on submit; `scontrol update`
carries no working directory, so use absolute paths there). An inline JSON spec (starting
with `{`) is written to a temporary file for gpucast and removed after. The GPU type must be a
catalog name (`gpucast gpus`); default `config.default_gpu`.

What it sets: `job_desc.tres_per_node` keeps the job's other GRES and replaces any gpu, shard or
mps entry with gpucast's; gpu/shard/mps entries in `tres_per_job`, `tres_per_task` and
`tres_per_socket` (from --gpus, --gpus-per-task, ...) are dropped, since Slurm refuses a job that
mixes GPU and shard/MPS GRES. Each decision is logged with slurm.log_info.

How it spells the GRES: Slurm 22.05 (tested here in a real slurmctld) writes TRES entries as
`gres:shard:3` and refuses `gres/shard:3` ("Invalid Trackable RESource (TRES) specification");
later releases write `gres/shard:3`. The plugin takes the spelling from the job's own GRES
entries when it has any, else from the Slurm version (`config.version_command`, asked once at
load: before 23.02 `gres:`, otherwise `gres/`); `config.tres_prefix` overrides both.

When gpucast cannot size an opted-in job (a bad spec, an unknown model or GPU, gpucast missing):
the job is rejected (slurm.ERROR) with gpucast's one-line error shown to the user
(slurm.log_user): a job that asked to be sized is not admitted unsized.

Time: slurmctld runs this plugin synchronously in its submit path, and sbatch gives up after
MessageTimeout (slurm.conf, default 10 s) with "Socket timed out" even though the job was
submitted. A local `gpucast slurm` imports torch and captures the model: seconds, more on a
loaded host. So either
  * run `gpucast serve` on the slurmctld host (e.g. as a systemd service as SlurmUser:
    `gpucast serve --host 127.0.0.1 --port 8000`) and set `config.service` to its URL
    ("http://127.0.0.1:8000"): the plugin passes `--service URL`, and a prediction the service
    has cached takes about as long as starting Python (no torch); or
  * raise MessageTimeout above the local prediction time (measure `time gpucast slurm SPEC`).
With `service` set: `service_timeout` bounds the wait for the service (seconds; default 5 in
gpucast). When the service is down, silent or failing, gpucast predicts locally and prints one
`warning:` line, which the plugin logs (slurm.log_info); with `fallback = false` the job is
rejected instead (`--no-fallback`). A job the service refuses (a bad spec) is rejected either way.
--]]

local config = {
  command = "gpucast",         -- the gpucast executable (may be "/opt/gpucast/bin/gpucast")
  default_gpu = "a100-80gb",   -- GPU type of the nodes, when the job does not name one
  shards_per_gpu = 8,          -- gres.conf: shards per GPU (Gres=gpu:N,shard:8*N)
  use_mps = false,             -- request gres/mps instead of gres/shard
  mps_per_gpu = 100,           -- gres.conf: MPS count per GPU
  service = nil,               -- a `gpucast serve` URL, e.g. "http://127.0.0.1:8000" (see Time above)
  service_timeout = nil,       -- seconds to wait for the service (nil: gpucast's default, 5)
  fallback = true,             -- service unavailable: predict locally (false: reject the job)
  tres_prefix = nil,           -- "gres:" (Slurm 22.05 and older) or "gres/" (newer); nil: detect
  version_command = "slurmctld -V 2>/dev/null || /usr/sbin/slurmctld -V 2>/dev/null",
}
-- A test harness (or a site wrapper) may preset the global `gpucast_config`; slurmctld does not.
if type(gpucast_config) == "table" then
  for k, v in pairs(gpucast_config) do config[k] = v end
end

local log_info = slurm.log_info
local log_user = slurm.log_user or function() end

-- The TRES prefix of this Slurm, from its version ("slurm 22.05.8"): see "How it spells" above.
local function version_prefix()
  if config.tres_prefix ~= nil then
    return config.tres_prefix
  end
  local out = ""
  local pipe = io.popen(config.version_command)
  if pipe ~= nil then
    out = pipe:read("*a") or ""
    pipe:close()
  end
  local major, minor = string.match(out, "(%d+)%.(%d+)")
  if major == nil then
    log_info("gpucast: Slurm version unknown (%s): writing gres/ TRES entries", config.version_command)
    return "gres/"
  end
  major, minor = tonumber(major), tonumber(minor)
  if major < 23 or (major == 23 and minor < 2) then
    return "gres:"
  end
  return "gres/"
end
local slurm_prefix = version_prefix()

-- The prefix to write for this job: the spelling of its own GRES entries, else Slurm's.
local function tres_prefix(job_desc)
  if config.tres_prefix ~= nil then
    return config.tres_prefix
  end
  for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket" }) do
    local value = job_desc[field]
    if value ~= nil then
      local p = string.match(value, "^(gres[:/])") or string.match(value, ",(gres[:/])")
      if p ~= nil then
        return p
      end
    end
  end
  return slurm_prefix
end

local function shell_quote(s)
  return "'" .. (string.gsub(s, "'", "'\\''")) .. "'"
end

-- The gpucast request of a job: spec (path or inline JSON), GPU name, where it came from; or nil.
local function opted_in(job_desc)
  local comment = job_desc.comment
  if comment ~= nil then
    local gpu, spec = string.match(comment, "^gpucast@([^:]+):(.+)$")
    if spec == nil then
      spec = string.match(comment, "^gpucast:(.+)$")
    end
    if spec ~= nil then
      return spec, gpu, "comment"
    end
  end
  local env = job_desc.environment
  if env ~= nil then
    local spec = env["GPUCAST_JOB"]
    if spec ~= nil and spec ~= "" then
      return spec, env["GPUCAST_GPU"], "environment"
    end
  end
  return nil
end

-- Run gpucast; returns the tres_per_node string (and gpucast's warning line, if any: the
-- service could not answer and gpucast predicted locally), or nil and a one-line error.
local function size(spec, gpu, work_dir)
  local path, tmp = spec, nil
  if string.sub(spec, 1, 1) == "{" then
    tmp = os.tmpname()
    local f = io.open(tmp, "w")
    if f == nil then
      return nil, "cannot write a temporary job spec file"
    end
    f:write(spec)
    f:close()
    path = tmp
  elseif string.sub(spec, 1, 1) ~= "/" and work_dir ~= nil and work_dir ~= "" then
    path = work_dir .. "/" .. spec
  end
  local args = { config.command, "slurm", shell_quote(path), "--gpu", shell_quote(gpu), "--json" }
  if config.use_mps then
    table.insert(args, "--mps --mps-per-gpu " .. tonumber(config.mps_per_gpu))
  else
    table.insert(args, "--shards-per-gpu " .. tonumber(config.shards_per_gpu))
  end
  if config.service ~= nil and config.service ~= "" then
    table.insert(args, "--service " .. shell_quote(tostring(config.service)))
    local timeout = tonumber(config.service_timeout)
    if timeout ~= nil then
      table.insert(args, "--service-timeout " .. shell_quote(tostring(timeout)))
    end
    if config.fallback == false then
      table.insert(args, "--no-fallback")
    end
  end
  local cmd = table.concat(args, " ") .. " 2>&1"
  local pipe = io.popen(cmd)
  local out = ""
  if pipe ~= nil then
    out = pipe:read("*a") or ""
    pipe:close()
  end
  if tmp ~= nil then
    os.remove(tmp)
  end
  local warning = string.match(out, "warning:%s*([^\n]+)")
  local tres = string.match(out, '"tres_per_node"%s*:%s*"(gres/[%w_]+:%d+)"')
  if tres ~= nil then
    return tres, nil, warning
  end
  local err = string.match(out, "error:%s*([^\n]+)")
  if err == nil then
    err = "gpucast gave no answer (" .. (string.match(out, "[^\n]+") or "no output") .. ")"
  end
  return nil, err, warning
end

-- A comma-separated TRES list without its gpu, shard and mps entries ("gres/gpu:a100:2", "gpu:1").
local function without_gpu_gres(list)
  if list == nil or list == "" then
    return list
  end
  local kept = {}
  for entry in string.gmatch(list, "[^,]+") do
    -- "gres/gpu:a100:2" (23.02+), "gres:gpu:2" (22.05), "gres/gpu=1" (tres_per_task), "gpu:1"
    local name = string.match(entry, "^gres[:/]([^:=]+)") or string.match(entry, "^([^:/=]+)")
    if name ~= "gpu" and name ~= "shard" and name ~= "mps" then
      table.insert(kept, entry)
    end
  end
  return table.concat(kept, ",")
end

local function apply(job_desc)
  local spec, gpu, source = opted_in(job_desc)
  if spec == nil then
    return slurm.SUCCESS
  end
  gpu = gpu or config.default_gpu
  if gpu == nil or gpu == "" or not string.match(gpu, "^[%w%-]+$") then
    local msg = "gpucast: the GPU type must be a catalog name (see `gpucast gpus`), got " .. tostring(gpu)
    log_info("%s", msg)
    log_user(msg)
    return slurm.ERROR
  end
  local tres, err, warning = size(spec, gpu, job_desc.work_dir)
  if warning ~= nil then
    log_info("gpucast: warning: %s", warning)
  end
  if tres == nil then
    local msg = "gpucast: cannot size the job (" .. source .. "): " .. err
    log_info("%s", msg)
    log_user(msg)
    return slurm.ERROR
  end
  tres = tres_prefix(job_desc) .. string.sub(tres, 6)   -- gpucast prints "gres/shard:3"
  local others = without_gpu_gres(job_desc.tres_per_node)
  if others ~= nil and others ~= "" then
    job_desc.tres_per_node = others .. "," .. tres
  else
    job_desc.tres_per_node = tres
  end
  for _, field in ipairs({ "tres_per_job", "tres_per_task", "tres_per_socket" }) do
    local value = job_desc[field]
    if value ~= nil and value ~= "" then
      local kept = without_gpu_gres(value)
      if kept ~= value then
        job_desc[field] = kept
      end
    end
  end
  log_info("gpucast: job from %s on %s: tres_per_node=%s", source, gpu, job_desc.tres_per_node)
  return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  return apply(job_desc)
end

-- On `scontrol update job ... Comment=gpucast:...` the job is sized again; other updates pass.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if job_desc.comment ~= nil and string.match(job_desc.comment, "^gpucast[:@]") then
    return apply(job_desc)
  end
  return slurm.SUCCESS
end

if config.service ~= nil and config.service ~= "" then
  log_info("gpucast job_submit plugin loaded (command %s, service %s)", config.command, tostring(config.service))
else
  log_info("gpucast job_submit plugin loaded (command %s)", config.command)
end
return slurm.SUCCESS
