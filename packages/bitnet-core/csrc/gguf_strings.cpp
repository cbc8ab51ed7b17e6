// GGUF string arrays (a tokenizer's 128k tokens and 280k merges) decoded at C speed.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>

#include "native.h"

namespace py = pybind11;

namespace bitnet {
namespace {

// Up to `n` strings of the GGUF bytes `buf` from `pos`: each a little-endian uint64
// length, then that many UTF-8 bytes (invalid ones replaced, as Python's "replace").
// Returns (strings, pos after the last one read); fewer than `n` strings when the
// next length or its bytes would run past the end, so that the caller names the
// failure where it happened.
py::tuple gguf_strings(const py::buffer &buf, uint64_t pos, uint64_t n) {
    const py::buffer_info info = buf.request();
    const auto *base = static_cast<const char *>(info.ptr);
    const uint64_t size = static_cast<uint64_t>(info.size) * static_cast<uint64_t>(info.itemsize);
    py::list out;
    for (uint64_t i = 0; i < n; ++i) {
        if (pos > size || size - pos < 8) break;
        uint64_t length;
        std::memcpy(&length, base + pos, 8);  // GGUF is little-endian, as every host we build for
        if (length > size - pos - 8) break;
        PyObject *s = PyUnicode_DecodeUTF8(base + pos + 8, static_cast<Py_ssize_t>(length), "replace");
        if (s == nullptr) throw py::error_already_set();
        out.append(py::reinterpret_steal<py::object>(s));
        pos += 8 + length;
    }
    return py::make_tuple(out, pos);
}

}  // namespace

void register_gguf(py::module_ &m) {
    m.def("gguf_strings", &gguf_strings, py::arg("buf"), py::arg("pos"), py::arg("n"),
          "Up to n GGUF strings from byte pos: (list of str, the position after them); "
          "fewer when the next one would run past the end.");
}

}  // namespace bitnet
