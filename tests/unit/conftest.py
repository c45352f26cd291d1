import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matrices: extra intra-op threads only fight each other (and other jobs) for the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
