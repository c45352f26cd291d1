"""What several test modules share: tiny model configs, the kernels' match criterion, fakes of the engine handle."""
