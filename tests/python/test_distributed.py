"""torch.distributed with gloo on CPU: each rank writes its own rank{R}/, directly (a pipeline per
rank) or under one `tprobe run`; the rank filter; collectives dumped with their result."""

import os
import unittest

import tprobe_testing as tt

DDP = """
import os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
import torch.nn.functional as F

def run(rank, world, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    from tprobe import PrecisionDebugger
    from model import make
    model, x, y = make()
    x = x + rank  # different data per rank
    debugger = PrecisionDebugger(config_path="./config.json")
    for step in range(STEPS):
        debugger.start(model)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        debugger.stop()
        debugger.step()
    debugger.close()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(2, os.path.join(os.getcwd(), "init")), nprocs=2)
"""


class DistributedTest(tt.CaptureTest):
    def check_ranks(self, run, ranks):
        self.assertEqual(sorted(os.listdir(os.path.join(run.dump, "step0"))), [f"rank{r}" for r in ranks])

    def test_two_ranks_direct(self):
        run = self.run_script(DDP)
        self.check_ranks(run, [0, 1])
        d0, d1 = run.data(rank=0), run.data(rank=1)
        self.assertEqual(list(d0), list(d1))
        # Different inputs, identical reduced gradients.
        x0 = d0["Functional.linear.0.forward"]["input_args"][0]
        x1 = d1["Functional.linear.0.forward"]["input_args"][0]
        self.assertNotEqual(x0["Mean"], x1["Mean"])
        reduce0, reduce1 = d0["Distributed.all_reduce.0.forward"], d1["Distributed.all_reduce.0.forward"]
        self.assertNotEqual(reduce0["input_args"][0][0]["Mean"], reduce1["input_args"][0][0]["Mean"])
        after0, after1 = reduce0["output"][0][0], reduce1["output"][0][0]
        self.assertEqual(after0, after1)
        self.assertAlmostEqual(after0["Mean"], reduce0["input_args"][0][0]["Mean"] + reduce1["input_args"][0][0]["Mean"],
                               places=5)

    def test_two_ranks_one_pipeline_rank_filter(self):
        run = self.run_script(DDP, config=tt.default_config(rank=[1]), manifest="statistics.json", steps=2)
        for step in (0, 1):
            self.assertEqual(os.listdir(os.path.join(run.dump, f"step{step}")), ["rank1"])
        self.assertIn("Distributed.all_reduce.3.forward", run.data(rank=1))


if __name__ == "__main__":
    unittest.main()
