"""Two first builds of Hugging Face models, interleaved at transformers' import, in a fresh interpreter.

Run by ``tests/graph/test_import_race.py`` and ``tests/service/test_import_race_service.py`` as
``python import_race.py MODE`` with ``GPUCAST_CACHE_DIR`` set; prints one JSON line.

* ``prefill``: makes the jobs once, so gpucast's disk cache remembers transformers' list of model
  types and the racing process does not import transformers before its threads do.
* ``predict``: thread A calls ``gpucast.predict`` on one GPT-2 config, thread B on another.
* ``service``: the real app on a loopback port (uvicorn); A and B are two ``POST /v1/predict``.
* ``zoo``: A reads the zoo first and is paused while it imports the family modules; B asks for a
  workload of a later family (the pause is in the import of ``gpucast.zoo.rnn`` instead).

No timing decides the interleaving. A meta-path hook pauses the first thread that imports a
``transformers.*`` module while ``transformers`` itself is still initialising (that is, inside
transformers' own ``__init__``), and holds it there until the other thread is seen blocked at an
import lock (CPython's, or gpucast's ``imports.LOCK``) or has finished. Only then does
the import go on. Without gpucast's lock B's ``import
transformers`` then returns the module object it found before waiting, the original one, and
reading ``transformers.AutoConfig`` from it fails; with the lock B imports after A is done.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import threading
import time

GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000, "n_positions": 128,
        "bos_token_id": 0, "eos_token_id": 0}
JOBS = [dict(batch_size=4, seq_len=32), dict(batch_size=8, seq_len=32)]
WAIT_S = 120.0  # the most the paused import waits for the other thread to block (never reached when it works)


def _blocked(frame) -> bool:
    """Whether a thread whose innermost Python frame is ``frame`` waits at an import lock."""
    code = frame.f_code
    if "importlib._bootstrap" in code.co_filename:
        # A module's lock, or the import system's own lock (held while meta-path finders run)
        return code.co_name in ("acquire", "_lock_unlock_module", "_get_module_lock")
    line = linecache.getline(code.co_filename, frame.f_lineno)
    return "gpucast" in code.co_filename and "LOCK" in line


def _inside_transformers(name: str) -> bool:
    """A ``transformers.*`` import while ``transformers`` itself is initialising."""
    top = sys.modules.get("transformers")
    initialising = top is not None and getattr(getattr(top, "__spec__", None), "_initializing", False)
    return name.startswith("transformers.") and initialising


class Pause:
    """The meta-path hook (see the module docstring): pauses the first import of a module that
    ``where(name)`` picks; ``state`` says what happened."""

    def __init__(self, where=_inside_transformers):
        self.where = where
        self.state = {"paused": None, "other_blocked": False}
        self.release = threading.Event()  # set by the driver once the other thread has finished

    def find_spec(self, name, path=None, target=None):
        if self.state["paused"] is None and self.where(name):
            me = threading.get_ident()
            self.state["paused"] = threading.current_thread().name
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and not self.release.is_set():
                frames = sys._current_frames()
                if any(_blocked(f) for ident, f in frames.items() if ident != me):
                    self.state["other_blocked"] = True
                    break
                time.sleep(0.005)
        return None  # the ordinary finders import it


def _jobs():
    from gpucast.job import Job

    return [Job.from_hf_config(GPT2, **kw) for kw in JOBS]


def _predict(out: dict, pause: Pause) -> None:
    import gpucast

    jobs = _jobs()  # from the disk cache's list of model types: transformers is not imported yet
    assert "transformers" not in sys.modules, "making the jobs imported transformers; run prefill first"

    def run(i):
        try:
            out[f"job{i}"] = round(gpucast.predict(jobs[i], "a100-80gb").step_time_s, 9)
        except Exception as exc:  # noqa: BLE001 - the outcome is the answer
            out[f"job{i}"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"

    _interleave(pause, lambda: run(0), lambda: run(1))


def _service(out: dict, pause: Pause) -> None:
    import httpx
    import uvicorn

    from gpucast.service import Settings, create_app

    app = create_app(Settings(workers=4))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    _wait(lambda: server.started)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/predict"
    with httpx.Client(timeout=WAIT_S * 2) as c:  # torch loaded before the race, on a zoo job
        assert c.post(url, json={"workload": "mlp-small", "batch_size": 8, "gpu": "t4"}).status_code == 200
    assert "transformers" not in sys.modules, "the service imported transformers before the race"

    def post(i):
        with httpx.Client(timeout=WAIT_S * 2) as c:
            r = c.post(url, json={"hf_config": GPT2, **JOBS[i], "gpu": "a100-80gb"})
        out[f"job{i}"] = [r.status_code, r.json()]

    _interleave(pause, lambda: post(0), lambda: post(1))
    server.should_exit = True
    thread.join(timeout=10)


def _zoo(out: dict, pause: Pause) -> None:
    """A reads the zoo first (its family modules are imported then, each registering its
    workloads) and is paused before the second family module; B asks for a workload of a later family."""
    from gpucast import zoo

    def get(name, key):
        try:
            out[key] = zoo.get(name).family
        except Exception as exc:  # noqa: BLE001 - the outcome is the answer
            out[key] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"

    _interleave(pause, lambda: get("mlp-small", "job0"), lambda: get("gpt2", "job1"))


def _interleave(pause: Pause, first, second) -> None:
    """Run ``first`` in thread A; once A is paused (or done), ``second`` in thread B; once B is
    blocked at an import lock (or done), let A go on; wait for both."""
    a = threading.Thread(target=first, name="A")
    a.start()
    _wait(lambda: pause.state["paused"] is not None or not a.is_alive())
    b = threading.Thread(target=second, name="B")
    b.start()
    _wait(lambda: pause.state["other_blocked"] or not b.is_alive())
    pause.release.set()
    a.join()
    b.join()


def _wait(cond, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.005)


def main(mode: str) -> None:
    assert os.environ.get("GPUCAST_CACHE_DIR"), "set GPUCAST_CACHE_DIR (a fresh folder)"
    if mode == "prefill":
        _jobs()
        print(json.dumps({"prefilled": True}))
        return
    pause = Pause((lambda name: name == "gpucast.zoo.rnn") if mode == "zoo" else _inside_transformers)
    sys.meta_path.insert(0, pause)
    out: dict = {}
    {"predict": _predict, "service": _service, "zoo": _zoo}[mode](out, pause)
    out.update(pause.state)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
