"""Machine facts and the one device check."""

import pytest
import torch

from sb3_snake.system import (
    available_memory_bytes,
    capabilities,
    check_device,
    cpu_cores,
    cpu_model,
    resolve_device,
    system_info,
)


def test_device_check_has_one_wording():
    assert check_device("cpu") == "cpu" and resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"^--device must be auto, cpu or cuda, got 'tpu'$"):
        check_device("tpu")
    with pytest.raises(ValueError, match="--device must be cpu or cuda, got 'auto'"):
        check_device("auto", allow_auto=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_without_a_gpu():
    with pytest.raises(ValueError, match="--device cuda was requested but no CUDA GPU is available; use --device cpu"):
        check_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


def test_facts():
    assert cpu_cores() >= 1 and cpu_model()
    available = available_memory_bytes()
    assert available is None or available > 2**20
    info = system_info()
    assert info["torch"] == torch.__version__ and info["cpu_cores"] >= 1
    assert {"cpu_native_bf16", "cuda_bf16"} <= set(capabilities())
