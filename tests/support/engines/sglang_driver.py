"""Runs SGLang's own code inside its venv (tests/support/engines/build.py) for the adapter tests; never imported
by the project. One JSON answer on stdout per call.

  validate FILE --ep-size N --redundant R      SGLang's loader (compute_initial_expert_location_metadata) on a
                                               DeepSeek-V3 model config (no weights) with --init-expert-location FILE
  dump DIR --passes FILE.json --buffer-size B  SGLang's stat recorder fed each pass's physical top-k ids
                                               ([passes][layers][tokens][k]), dumped to DIR after every pass group
  live SPEC.json                               moectl's live plugin hooked into SGLang's EPLBManager, called per
                                               rebalance with placements armed between calls
  server-info --ep-size N --redundant R        the fields SGLang's /server_info shows (ServerArgs.resolved_dict)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

# after the venv's own packages (SGLang's pins win), the test run's venv for our torch 2.13 CPU build and NumPy
sys.path.append(os.environ["MOECTL_PROJECT_SITE"])

import torch  # noqa: E402

# a GPU's recorder empties its allocator cache on the first dump; the CPU has none to empty
torch.cpu.empty_cache = getattr(torch.cpu, "empty_cache", lambda: None)

# DeepSeek-V3's MoE layout (config.json on the Hub): what the tests write placements for
DEEPSEEK_V3 = dict(n_routed_experts=256, num_hidden_layers=61, first_k_dense_replace=3, n_group=8, topk_group=4,
                   num_experts_per_tok=8, moe_layer_freq=1)


def _model_config(config: dict):
    from sglang.srt.configs.model_config import ModelConfig
    from transformers import DeepseekV3Config

    hf = DeepseekV3Config(**config)
    hf.architectures = ["DeepseekV3ForCausalLM"]
    path = tempfile.mkdtemp(prefix="moectl-dsv3-")
    hf.save_pretrained(path)
    return ModelConfig(model_path=path)


def validate(args: argparse.Namespace) -> dict:
    from sglang.srt.eplb.expert_location import compute_initial_expert_location_metadata
    from sglang.srt.runtime_context import get_context

    config = DEEPSEEK_V3 | json.loads(args.config)
    with get_context().override_server_args(init_expert_location=args.file, ep_num_redundant_experts=args.redundant,
                                            ep_size=args.ep_size, tp_size=args.ep_size, device="cpu"):
        meta = compute_initial_expert_location_metadata(_model_config(config), moe_ep_rank=0)
    valid = meta.logical_to_all_physical_map_num_valid
    return {"num_layers": meta.num_layers, "num_physical_experts": meta.num_physical_experts,
            "num_logical_experts": meta.num_logical_experts, "ep_size": meta.ep_size,
            "min_replicas": int(valid.min()), "physical_to_logical_map": meta.physical_to_logical_map_cpu.tolist()}


def dump(args: argparse.Namespace) -> dict:
    os.environ["SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"] = args.dir
    # the recorder's buffers go on SGLang's device: its CPU one (set only here, before SGLang is imported:
    # with it, importing the model registry for the loader asks for sgl_kernel's CPU ops)
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    import torch.distributed as dist
    from sglang.srt.eplb import expert_location as el
    from sglang.srt.eplb.expert_distribution import ExpertDistributionRecorder
    from sglang.srt.runtime_context import get_context

    spec = json.loads(open(args.passes).read())
    num_layers, num_logical, ep_size = spec["num_layers"], spec["num_experts"], spec["ep_size"]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec['port']}", rank=0, world_size=1)
    with get_context().override_server_args(ep_size=ep_size, tp_size=ep_size, device="cpu",
                                            ep_num_redundant_experts=spec.get("redundant", 0),
                                            expert_distribution_recorder_mode="stat",
                                            expert_distribution_recorder_buffer_size=args.buffer_size):
        p2l = torch.tensor(spec["physical_to_logical_map"])
        l2all = el._compute_logical_to_all_physical_map(physical_to_logical_map=p2l, num_logical_experts=num_logical,
                                                        ep_size=ep_size, moe_ep_rank=0)
        meta = el.ExpertLocationMetadata._init_raw(ep_size=ep_size, physical_to_logical_map=p2l,
                                                   logical_to_all_physical_map=l2all, moe_ep_rank=0)
        recorder = ExpertDistributionRecorder.init_new(meta, rank=0)
        recorder.start_record()  # once, as the sidecar does
        num_passes = 0
        for group in spec["windows"]:
            for topk_of_layer in group:
                with recorder.with_forward_pass(num_passes, None):
                    for layer, topk in enumerate(topk_of_layer):
                        if topk:
                            with recorder.with_current_layer(layer):
                                recorder.on_select_experts(torch.tensor(topk))
                num_passes += 1
            recorder.dump_record("file")
    assert num_layers == p2l.shape[0]
    return {"files": sorted(os.listdir(args.dir))}


def live(args: argparse.Namespace) -> dict:
    """moectl's live plugin (agents/adapters/sglang/live_plugin.py) registered in SGLang's HookRegistry and applied
    to SGLang's EPLBManager, whose _compute_expert_location_metadata then runs once per given logical_count, as
    each rebalance calls it; placements are armed between calls as the sidecar arms them. Answers each call's map."""
    from pathlib import Path

    from sglang.srt.eplb.eplb_manager import EPLBManager
    from sglang.srt.eplb.expert_location import ExpertLocationMetadata, set_global_expert_location_metadata
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.runtime_context import get_context

    from agents.adapters import state_dir
    from agents.adapters.arming import ArmedPlacement, arm_call
    from agents.adapters.sglang import live_plugin

    spec = json.loads(open(args.spec).read())
    directory = Path(spec["state_dir"])
    os.environ[live_plugin.STATE_DIR_ENV] = str(directory)
    os.environ.pop("MOECTL_ENGINE_EPOCH", None)  # a new engine: a new epoch (agents/adapters/epoch.py)
    live_plugin.register()  # as SGLang's loader calls the entry point (pyproject.toml)
    HookRegistry.apply_hooks()
    maps = []
    with get_context().override_server_args(ep_size=8, tp_size=8, ep_num_redundant_experts=32, device="cpu",
                                            enable_eplb=True):
        model_config = _model_config(DEEPSEEK_V3)
        set_global_expert_location_metadata(ExpertLocationMetadata.init_trivial(model_config, moe_ep_rank=0))
        manager = EPLBManager.__new__(EPLBManager)  # what rebalance reads of itself here: the model config
        manager._model_config = model_config
        for call, logical_count in enumerate(spec["logical_counts"]):
            for armed in spec["arm_before"].get(str(call), []):
                newest = state_dir.read_loads(directory)[-1]
                state_dir.arm(directory, ArmedPlacement(armed["version"], arm_call(newest["call"]),
                                                        torch.tensor(armed["table"]).numpy(), newest["epoch"],
                                                        newest["model"]))
            metadata = manager._compute_expert_location_metadata(torch.tensor(logical_count),
                                                                 broadcast_over_world=False)
            maps.append(metadata.physical_to_logical_map_cpu.tolist())
    return {"maps": maps}


def server_info(args: argparse.Namespace) -> dict:
    from sglang.srt.runtime_context import get_context

    with get_context().override_server_args(ep_size=args.ep_size, tp_size=args.ep_size, device="cpu",
                                            ep_num_redundant_experts=args.redundant,
                                            expert_distribution_recorder_mode="stat") as server_args:
        info = server_args.resolved_dict()
    import sglang

    return {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool, type(None)))} | \
        {"version": sglang.__version__}


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("validate")
    q.add_argument("file")
    q.add_argument("--ep-size", type=int, required=True)
    q.add_argument("--redundant", type=int, default=0)
    q.add_argument("--config", default="{}", help="config.json fields over DeepSeek-V3's")
    q = sub.add_parser("dump")
    q.add_argument("dir")
    q.add_argument("--passes", required=True)
    q.add_argument("--buffer-size", type=int, default=1000)
    q = sub.add_parser("live")
    q.add_argument("spec")
    q = sub.add_parser("server-info")
    q.add_argument("--ep-size", type=int, default=8)
    q.add_argument("--redundant", type=int, default=0)
    args = p.parse_args()
    answer = {"validate": validate, "dump": dump, "live": live, "server-info": server_info}[args.command](args)
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
