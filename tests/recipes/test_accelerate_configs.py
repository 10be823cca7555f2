"""The shipped accelerate configs: parsed by accelerate itself, resolved the way `accelerate launch`
resolves them, documented (tests/integration/test_accelerate_configs.py launches them: multi_process.yaml really
starts 2 communicating CPU processes, and each config that runs on CPU trains)."""

from __future__ import annotations

import pytest
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DistributedType
from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

from tests.testing_utils import CONFIG_DIR

# name -> (distributed_type, num_processes, use_cpu, mixed_precision)
EXPECTED = {
    "cpu.yaml": (DistributedType.NO, 1, True, "no"),
    "multi_process.yaml": (DistributedType.MULTI_GPU, 2, True, "no"),
    "multi_node.yaml": (DistributedType.MULTI_GPU, 16, False, "bf16"),  # 16 = the total over its 2 machines
    "single_gpu.yaml": (DistributedType.NO, 1, False, "bf16"),
    "multi_gpu.yaml": (DistributedType.MULTI_GPU, 8, False, "bf16"),
    "fsdp2.yaml": (DistributedType.FSDP, 8, False, "bf16"),
    "fsdp2_tp.yaml": (DistributedType.FSDP, 8, False, "bf16"),
    "deepspeed_zero2.yaml": (DistributedType.DEEPSPEED, 8, False, "bf16"),
    "deepspeed_zero3.yaml": (DistributedType.DEEPSPEED, 8, False, "bf16"),
}
# name -> which `accelerate launch` launcher the config selects
LAUNCHER = {
    "cpu.yaml": "simple",
    "multi_process.yaml": "multi_gpu",
    "multi_node.yaml": "multi_gpu",
    "single_gpu.yaml": "simple",
    "multi_gpu.yaml": "multi_gpu",
    "fsdp2.yaml": "fsdp",
    "fsdp2_tp.yaml": "fsdp",
    "deepspeed_zero2.yaml": "deepspeed",
    "deepspeed_zero3.yaml": "deepspeed",
}


def _resolve(name: str):
    """Run accelerate's own launch-argument resolution on a config, without launching anything."""
    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(CONFIG_DIR / name), "script.py"])
    args, defaults, _ = _validate_launch_command(args)
    return args, defaults


def _launcher(args) -> str:
    if args.use_deepspeed:
        return "deepspeed"
    if args.use_fsdp:
        return "fsdp"
    if args.multi_gpu:
        return "multi_gpu"
    return "simple"


def test_shipped_configs_are_exactly_the_expected_set():
    assert sorted(p.name for p in CONFIG_DIR.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_parses_with_accelerate_cluster_config(name):
    config = load_config_from_file(str(CONFIG_DIR / name))
    assert isinstance(config, ClusterConfig)
    distributed_type, num_processes, use_cpu, mixed_precision = EXPECTED[name]
    assert config.distributed_type == distributed_type
    assert config.num_processes == num_processes
    assert config.use_cpu is use_cpu
    assert config.mixed_precision == mixed_precision
    assert config.num_machines == (2 if name == "multi_node.yaml" else 1)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_launch_resolves_to_the_intended_launcher(name):
    args, _ = _resolve(name)
    assert _launcher(args) == LAUNCHER[name]
    assert args.num_processes == EXPECTED[name][1]
    assert args.mixed_precision == EXPECTED[name][3]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_nested_keys_are_real_launch_options(name):
    # accelerate copies nested keys onto the launch namespace without checking them, so a typo
    # (`fsdp_versoin: 2`) would be ignored silently; every nested key must name a launch option.
    known = vars(launch_command_parser().parse_args(["script.py"]))
    config = load_config_from_file(str(CONFIG_DIR / name))
    for section in ("fsdp_config", "deepspeed_config", "parallelism_config"):
        for key in getattr(config, section):
            option = key if section != "fsdp_config" or key.startswith("fsdp") else f"fsdp_{key}"
            assert option in known, f"{name}: {section}.{key} is not an `accelerate launch` option"


def test_fsdp2_config_selects_fsdp_version_2():
    args, _ = _resolve("fsdp2.yaml")
    env = prepare_multi_gpu_env(args)
    assert env["ACCELERATE_USE_FSDP"] == "true"
    assert env["FSDP_VERSION"] == "2"
    assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"
    assert env["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_fsdp2_tp_config_selects_fsdp2_with_a_tp_mesh_dimension():
    args, _ = _resolve("fsdp2_tp.yaml")
    env = prepare_multi_gpu_env(args)
    assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == "2"
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    sizes = {k: int(env[f"PARALLELISM_CONFIG_{k}_SIZE"]) for k in ("DP_REPLICATE", "DP_SHARD", "TP", "CP")}
    assert sizes == {"DP_REPLICATE": 1, "DP_SHARD": 4, "TP": 2, "CP": 1}
    assert sizes["DP_REPLICATE"] * sizes["DP_SHARD"] * sizes["TP"] * sizes["CP"] == args.num_processes


@pytest.mark.parametrize("name, stage", [("deepspeed_zero2.yaml", "2"), ("deepspeed_zero3.yaml", "3")])
def test_deepspeed_configs_select_their_zero_stage(name, stage):
    # Resolved without DeepSpeed installed: only its launcher needs the package.
    args, defaults = _resolve(name)
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
    _, env = prepare_deepspeed_cmd_env(args)
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == stage
    assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == ("true" if stage == "3" else "false")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_is_documented(name):
    lines = (CONFIG_DIR / name).read_text(encoding="utf-8").splitlines()
    header = [line for line in lines if line.startswith("#")]
    command = (
        f"accelerate launch --config_file recipes/accelerate_configs/{name} "
        "recipes/pretrain.py --config recipes/configs/causal/demo.yaml"
    )
    assert lines[0].startswith(f"# {name}:"), "the header opens with the file name and its purpose"
    assert any(command in line for line in header), f"{name}: header lacks the launch command"
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#") and not line.rstrip().endswith(":"):
            assert " # " in line, f"{name}: key without a comment: {line!r}"
