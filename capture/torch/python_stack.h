// python_stack.h: the Python call stack of the thread running an operator, for stack.json.
//
// An operator reaches the capture deep inside C++, with the GIL released by torch's Python
// bindings. python_stack_current() takes the GIL back for a moment (PyGILState_Ensure restores
// this thread's own state, so PyEval_GetFrame returns the frame that called the operator), walks
// the frames and returns an interned stack id: identical stacks (same code objects and lines)
// share one id and are formatted once, so the usual cost is a frame walk and a hash lookup.
//
// No Python header or library is needed to build this: the handful of CPython functions used are
// declared weak and resolved at load time from the interpreter that loaded us. Outside a Python
// process (or before Py_Initialize / during finalisation) there is simply no stack.
//
// Lines have msprobe's form (docs/msprobe-compat.md §2.8), innermost frame first:
//   "File /path/train.py, line 42, in forward, \n x = F.linear(x, w)"
// Frames from files under an excluded directory (tprobe's own package) are left out.
//
// Thread-safety: every function may be called from any thread. Never call python_stack_current()
// while holding a lock that a thread holding the GIL may wait for.
#pragma once

#include <string>
#include <vector>

namespace tprobe::torch_capture {

// Interned stack id of the calling thread's Python stack, or -1 when there is none.
int python_stack_current();

// The lines of an interned stack as C strings, valid for the life of the process.
const std::vector<const char *> &python_stack_lines(int id);

// Frames whose file name starts with `dir` are left out of stacks formatted from now on.
void python_stack_exclude(const std::string &dir);

}  // namespace tprobe::torch_capture
