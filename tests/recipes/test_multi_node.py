"""recipes/accelerate_configs/multi_node.yaml: parsed and resolved the way `accelerate launch` does on each
machine (tests/integration/test_multi_node.py launches two "machines" of one CPU process each on loopback)."""

from __future__ import annotations

from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DistributedType
from accelerate.utils.launch import prepare_multi_gpu_env

from tests.testing_utils import CONFIG_DIR

MULTI_NODE = CONFIG_DIR / "multi_node.yaml"


def _resolve(*flags: str):
    """accelerate's own launch-argument resolution of multi_node.yaml plus ``flags``, launching nothing."""
    args = launch_command_parser().parse_args(["--config_file", str(MULTI_NODE), *flags, "script.py"])
    args, _, _ = _validate_launch_command(args)
    return args


def test_multi_node_config_parses_with_two_machines():
    config = load_config_from_file(str(MULTI_NODE))
    assert isinstance(config, ClusterConfig)
    assert config.distributed_type == DistributedType.MULTI_GPU
    assert (config.num_machines, config.machine_rank) == (2, 0)
    assert config.num_processes == 16  # the total over both machines
    assert config.main_process_port == 29500  # fixed: a free port per machine would never meet
    assert (config.use_cpu, config.mixed_precision) == (False, "bf16")


def test_multi_node_launch_gives_each_machine_its_share_and_rank():
    # The command of machine 1 (no port check there: only machine 0 listens).
    args = _resolve("--machine_rank", "1", "--main_process_ip", "10.0.0.1")
    prepare_multi_gpu_env(args)
    assert args.multi_gpu and args.num_machines == 2
    assert (args.nproc_per_node, args.nnodes, args.node_rank) == ("8", "2", 1)  # num_processes // num_machines
    assert (args.rdzv_backend, args.rdzv_endpoint) == ("static", "10.0.0.1:29500")


def test_multi_node_header_has_every_launcher():
    header = "\n".join(line for line in MULTI_NODE.read_text(encoding="utf-8").splitlines() if line.startswith("#"))
    for rank in (0, 1):
        assert f"multi_node.yaml --machine_rank {rank} --main_process_ip <host0>" in header
    assert "torchrun --nnodes 2 --node_rank 0" in header and "--rdzv_endpoint <host0>:29500" in header
    assert "srun --nodes 2" in header and "--machine_rank $SLURM_NODEID" in header
