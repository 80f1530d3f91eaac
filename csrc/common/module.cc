// SPDX-License-Identifier: Apache-2.0
// The Python module object of common_ops. Importing it runs the static TORCH_LIBRARY
// registrations of every family; the module itself holds nothing (ops live under
// torch.ops.sgl_kernel). Limited API only (abi3 wheel).
#include <Python.h>

static PyModuleDef sgl_common_ops_module = {
    PyModuleDef_HEAD_INIT, "common_ops", "sgl_kernel compiled ops (see torch.ops.sgl_kernel)", -1,
    nullptr, nullptr, nullptr, nullptr, nullptr};

extern "C" PyMODINIT_FUNC PyInit_common_ops(void) { return PyModule_Create(&sgl_common_ops_module); }
