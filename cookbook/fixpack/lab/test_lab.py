"""The lab itself: the release's modules come from the tree under test and import on the CPU."""

import importlib
from pathlib import Path


def test_vllm_and_vllm_gaudi_come_from_the_tree(tree):
    import vllm
    import vllm_gaudi

    for module in (vllm, vllm_gaudi):
        assert Path(module.__file__).resolve().is_relative_to(tree.resolve()), module.__file__


def test_the_runner_input_batch_and_scheduler_import_on_cpu():
    for name in ("vllm_gaudi.v1.worker.hpu_model_runner", "vllm_gaudi.v1.worker.hpu_input_batch",
                 "vllm_gaudi.v1.core.sched.hpu_async_scheduler"):
        assert importlib.import_module(name)
