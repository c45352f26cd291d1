"""The test suite, laid out like the code: engine/, kernels/, app/, widgets/, ui/ (browser), gpu/ (CUDA),
helpers/ (tiny models and shared criteria that tests import as tests.helpers.*)."""
