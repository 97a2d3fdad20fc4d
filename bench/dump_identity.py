#!/usr/bin/env python3
"""Dumps of the bench models by two builds, compared byte for byte:

    PYTHONPATH=python /usr/bin/python3 bench/dump_identity.py --against DIR
        [--model resnet18,transformer,gru|tiny] [--configs statistics_L0,...] [--steps N] [--quick]
        [--keep DIR]

For each model (bench_torch.py's MODELS: examples/train_resnet18.py, examples/train_transformer.py,
bench/train_gru.py, "tiny" the small GRU) and each configuration (examples/configs/*.json, as
bench_torch.py runs them: statistics L0, L1 and mix, summary_mode md5, and task tensor), it trains
the model --steps steps under PrecisionDebugger in direct mode twice: with this tree's build
(build/lib/libtprobe_torch.so and build/bin, or $TPROBE_TORCH_LIBRARY and $TPROBE_BIN_DIR) and with
the build in DIR (DIR/lib/libtprobe_torch.so and DIR/bin; DIR/python and DIR/pipelines too when
DIR has them). The same seed gives both the same weights and batches. Then every file of the two
dump trees is compared byte for byte: dump.json, stack.json, construct.json, the .npy files, any
other file. One line per file that differs, or is in one tree only; exit 1 if any, 0 when all are
identical, 100 on a usage error, 111 when a training run fails.

Nothing is ignored: a dump holds no time or pid of its run (dump.json's fields are the tensors'
statistics and names, stack.json the Python stacks, which name this tree's files in both runs,
construct.json the module tree). Its one path, dump.json's dump_data_dir (task tensor), is the
same because both runs dump into the same folder, each then moved aside. So every byte must be
the same. --quick: the tiny
model, 2 steps, statistics L1 and md5 (the ctest's run).
"""
import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

# bench_torch.py's MODELS, as scripts: (script, its extra arguments).
MODELS = {"resnet18": ("examples/train_resnet18.py", []),
          "transformer": ("examples/train_transformer.py", []),
          "gru": ("bench/train_gru.py", []),
          "tiny": ("bench/train_gru.py", ["--hidden", "16", "--seq", "8", "--layers", "1", "--batch", "4"])}
ALL_MODELS = ["resnet18", "transformer", "gru"]
CONFIGS = ["statistics_L0", "statistics_L1", "statistics_mix", "md5", "tensor"]
QUICK_CONFIGS = ["statistics_L1", "md5"]


def build_env(library, bin_dir, python=None, pipelines=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TPROBE_")}  # no endpoint, no switch: direct mode, the defaults
    env["TPROBE_TORCH_LIBRARY"] = library
    env["TPROBE_BIN_DIR"] = bin_dir
    if pipelines:
        env["TPROBE_PIPELINES"] = pipelines
    python = python or os.path.join(ROOT, "python")
    env["PYTHONPATH"] = python + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    return env


def this_build():
    library = os.environ.get("TPROBE_TORCH_LIBRARY") or os.path.join(ROOT, "build", "lib", "libtprobe_torch.so")
    bin_dir = os.environ.get("TPROBE_BIN_DIR") or os.path.join(ROOT, "build", "bin")
    return build_env(library, bin_dir)


def other_build(directory):
    """The environment that runs the build in `directory`; raises ValueError if it lacks a piece."""
    library = os.path.join(directory, "lib", "libtprobe_torch.so")
    bin_dir = os.path.join(directory, "bin")
    for needed in (library, os.path.join(bin_dir, "tprobe-run"), os.path.join(bin_dir, "tprobe-writer")):
        if not os.path.isfile(needed):
            raise ValueError(f"--against {directory}: {needed} does not exist (a build directory's lib/ and bin/)")
    python = os.path.join(directory, "python")
    pipelines = os.path.join(directory, "pipelines")
    return build_env(library, bin_dir, python if os.path.isfile(os.path.join(python, "tprobe", "__init__.py")) else None,
                     pipelines if os.path.isdir(pipelines) else None)


def write_config(name, dump, path):
    with open(os.path.join(ROOT, "examples", "configs", name + ".json")) as f:
        doc = json.load(f)
    doc["dump_path"] = dump
    with open(path, "w") as f:
        json.dump(doc, f)


def dump_once(model, config_name, steps, dump, env, log):
    """Trains `model` `steps` steps under `config_name` into `dump`; raises RuntimeError if it fails."""
    script, extra = MODELS[model]
    config = dump + ".json"
    write_config(config_name, dump, config)
    cmd = [sys.executable, os.path.join(ROOT, script), "--quiet", "--threads", "1", "--steps", str(steps),
           *extra, "--config", config, "--dump-path", dump]
    with open(log, "w") as out:
        status = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if status != 0:
        with open(log) as f:
            raise RuntimeError(f"{model} {config_name}: exit status {status}:\n{f.read()[-3000:]}")


def compare_trees(a, b):
    """Every file under `a` or `b` (paths relative to them) that differs: a list of (path, why),
    sorted; empty when both trees hold the same files with the same bytes."""
    def files(top):
        found = set()
        for folder, _, names in os.walk(top):
            for n in names:
                found.add(os.path.relpath(os.path.join(folder, n), top))
        return found
    fa, fb = files(a), files(b)
    diffs = [(p, "only in " + a) for p in fa - fb] + [(p, "only in " + b) for p in fb - fa]
    for p in fa & fb:
        x, y = os.path.join(a, p), os.path.join(b, p)
        if not filecmp.cmp(x, y, shallow=False):
            sx, sy = os.path.getsize(x), os.path.getsize(y)
            diffs.append((p, f"differs ({sx} and {sy} bytes)" if sx != sy else f"differs ({sx} bytes each)"))
    return sorted(diffs)


def count_files(top):
    return sum(len(names) for _, _, names in os.walk(top))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", metavar="DIR", required=True,
                   help="the other build: DIR/lib/libtprobe_torch.so and DIR/bin")
    p.add_argument("--model", default=",".join(ALL_MODELS),
                   help=f"comma-separated, of {', '.join(MODELS)} (default {','.join(ALL_MODELS)})")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    p.add_argument("--steps", type=int, default=2, help="training steps per dump (default 2)")
    p.add_argument("--quick", action="store_true", help="the tiny model, 2 steps, " + " and ".join(QUICK_CONFIGS))
    p.add_argument("--keep", metavar="DIR", help="write the dumps here and keep them (default: a temp dir, removed)")
    try:
        opts = p.parse_args(argv)
    except SystemExit as e:
        return 100 if e.code else 0
    if opts.quick:
        opts.model, opts.configs, opts.steps = "tiny", ",".join(QUICK_CONFIGS), 2
    models, configs = opts.model.split(","), opts.configs.split(",")
    bad = [m for m in models if m not in MODELS] + [c for c in configs if c not in CONFIGS]
    if bad or opts.steps < 1:
        print(f"dump_identity: fatal: unknown models or configurations: {', '.join(bad)}" if bad
              else "dump_identity: fatal: --steps must be at least 1", file=sys.stderr)
        return 100
    try:
        theirs = other_build(os.path.abspath(opts.against))
    except ValueError as e:
        print(f"dump_identity: fatal: {e}", file=sys.stderr)
        return 100
    ours = this_build()

    tmp = opts.keep or tempfile.mkdtemp(prefix="tprobe-identity-")
    os.makedirs(tmp, exist_ok=True)
    differing = files = 0
    try:
        for model in models:
            for config in configs:
                # Both runs dump into the same path (dump.json's dump_data_dir names it), each
                # then moved aside.
                dumps = []
                dump = os.path.join(tmp, f"{model}-{config}")
                for side, env in (("this", ours), ("against", theirs)):
                    dump_once(model, config, opts.steps, dump, env, f"{dump}-{side}.log")
                    os.rename(dump, f"{dump}-{side}")
                    dumps.append(f"{dump}-{side}")
                diffs = compare_trees(*dumps)
                n = count_files(dumps[0])
                files += n
                differing += len(diffs)
                for path, why in diffs:
                    print(f"{model} {config}: {path}: {why}")
                print(f"{model} {config}: {n} files, {len(diffs)} differ", flush=True)
    except RuntimeError as e:
        print(f"dump_identity: fatal: {e}", file=sys.stderr)
        return 111
    finally:
        if not opts.keep:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"dump_identity: {files} files compared, {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
