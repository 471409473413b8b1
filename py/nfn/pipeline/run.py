"""Running a pipeline's stages: each skipped when it finished before, resumable after a kill.

The output directory holds pipeline.json (the size and corpus it was made with: a rerun with
other ones is refused), pipeline/STAGE.json for each finished stage (written atomically when
the stage ends: its presence is what "done" means), logs/STAGE.log (each stage's output, also
streamed to stderr) and the stages' own outputs. One pipeline at a time holds pipeline/lock.

Each stage's commands run as child processes in a session of their own, with NFN_PIPELINE_RUN
set to a token of this run. A kill -9 of the pipeline can leave a stage's trainer running; the
next run, once it holds the lock (so the killer's pipeline is gone), stops the processes that
carry an earlier run's token before it resumes that stage.
"""
import fcntl
import os
import secrets
import signal
import subprocess
import sys
import time

from nfn import child, fileio, paths
from nfn.errors import UserError
from nfn.pipeline import plan as plan_lib

def child_env(plan, token):
    env = dict(os.environ)
    env[paths.DATASETS_ENV] = plan.path("datasets")
    env["NFN_PIPELINE_RUN"] = token
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _environ_token(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"NFN_PIPELINE_RUN="):
                    return item.split(b"=", 1)[1].decode("ascii", "replace")
    except OSError:
        pass
    return None


def leftovers(token):
    """Pids of processes started by the pipeline run whose token this is."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and _environ_token(name) == token:
            out.append(int(name))
    return out


def stop_leftovers(token, say):
    pids = leftovers(token)
    if not pids:
        return
    say(f"stopping {len(pids)} process(es) an interrupted run left behind: {', '.join(map(str, pids))}")
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while time.time() < deadline and leftovers(token):
            time.sleep(0.1)
        pids = leftovers(token)
        if not pids:
            return
    raise UserError(f"processes of an interrupted pipeline run would not stop: {pids}")


class Lock:
    """pipeline/lock, held (flock) while this process runs; a second pipeline on the same
    directory is refused in one line."""

    def __init__(self, path):
        self.path = path
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise UserError(f"another nfn pipeline is running in {os.path.dirname(os.path.dirname(self.path))}") \
                from None
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def identity(plan):
    """What pipeline.json records: a rerun must name the same size and corpus."""
    return {"size": plan.size.name, "dataset": plan.dataset, "vocab_size": plan.size.vocab_size,
            "tokenizer": plan.tokenizer}


def check_identity(plan):
    path = plan.path("pipeline.json")
    want = identity(plan)
    if os.path.isfile(path):
        have = fileio.read_json(path)
        mine = {k: have.get(k) for k in want}
        if mine != want:
            diff = ", ".join(f"{k} {mine[k]!r} (asked: {want[k]!r})" for k in want if mine[k] != want[k])
            raise UserError(f"{plan.out} holds a pipeline made with {diff}: use another --output-dir")
        return have
    record = dict(want, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    fileio.write_json(path, record)
    return record


def stream(argv, env, log, say_prefix):
    """Runs one command, its stdout and stderr appended to `log` and copied to our stderr line by
    line (stdout stays the pipeline's: --json prints there); its exit code."""
    proc = subprocess.Popen(child.argv("nfn.cli.main:main", argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        for raw in iter(proc.stdout.readline, b""):
            log.write(raw)
            log.flush()
            sys.stderr.write(say_prefix + raw.decode("utf-8", "replace"))
            sys.stderr.flush()
        return proc.wait()
    except BaseException:
        # Ctrl-C or an error here: the stage's process group goes with us.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait()
        raise


def stage_file(plan, name):
    return plan.path("pipeline", f"{name}.json")


def needs(plan, name):
    """The earlier stage outputs a stage reads, missing ones named."""
    required = {"base": ["tokenizer"], "base-eval": ["base"], "sft": ["base"], "rl": ["sft"],
                "chat-eval": ["rl"], "report": ["base", "sft", "rl"]}.get(name, [])
    missing = [s for s in required if not os.path.exists(plan.output(s))]
    if missing:
        raise UserError(f"stage {name}: the output of {', '.join(missing)} is missing "
                        f"({', '.join(plan.output(s) for s in missing)})")


def run(plan):
    """Runs the plan's stages in order; returns {stage: {"status", "seconds"}}."""
    os.makedirs(plan.path("pipeline"), exist_ok=True)
    os.makedirs(plan.path("logs"), exist_ok=True)

    def say(text):
        print(f"nfn pipeline: {text}", file=sys.stderr, flush=True)

    with Lock(plan.path("pipeline", "lock")):
        check_identity(plan)
        running = plan.path("pipeline", "running.json")
        if os.path.isfile(running):
            stop_leftovers(fileio.read_json(running).get("token", ""), say)
        token = secrets.token_hex(8)
        fileio.write_json(running, {"token": token, "pid": os.getpid()})
        env = child_env(plan, token)
        statuses = {}
        names = list(plan_lib.STAGES)
        for i, name in enumerate(names, 1):
            done = stage_file(plan, name)
            if os.path.isfile(done):
                statuses[name] = dict(fileio.read_json(done), status="done before")
                say(f"[{i}/{len(names)}] {name}: done before, skipped")
                continue
            needs(plan, name)
            started = time.time()
            log_path = plan.path("logs", f"{name}.log")
            with open(log_path, "ab") as log:
                for argv in plan.stages[name]:
                    say(f"[{i}/{len(names)}] {name}: nfn {' '.join(argv)}")
                    log.write(f"$ nfn {' '.join(argv)}\n".encode())
                    code = stream(argv, env, log, f"  {name} | ")
                    if code != 0:
                        raise UserError(f"stage {name} failed: `nfn {' '.join(argv)}` exited {code} "
                                        f"(log: {log_path}); rerun the pipeline to continue from there")
            if name == "report":
                from nfn.pipeline import summary
                summary.write_report(plan)
            seconds = round(time.time() - started, 1)
            fileio.write_json(done, {"stage": name, "seconds": seconds,
                                     "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            statuses[name] = {"status": "ran", "seconds": seconds}
            say(f"[{i}/{len(names)}] {name}: done in {seconds:.0f} s")
        os.remove(running)
        return statuses
