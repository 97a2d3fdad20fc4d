#include "python_stack.h"

#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "dump_semantics.h"

// The CPython functions we use, declared weak: resolved from the interpreter that loaded this
// library, null anywhere else. PyGILState_STATE is an int-sized enum.
extern "C" {
struct _object;
struct _frame;
__attribute__((weak)) int Py_IsInitialized(void);
__attribute__((weak)) int _Py_IsFinalizing(void);  // CPython < 3.13
__attribute__((weak)) int Py_IsFinalizing(void);   // CPython >= 3.13
__attribute__((weak)) void *PyGILState_GetThisThreadState(void);
__attribute__((weak)) int PyGILState_Ensure(void);
__attribute__((weak)) void PyGILState_Release(int);
__attribute__((weak)) _frame *PyEval_GetFrame(void);
__attribute__((weak)) _object *PyFrame_GetCode(_frame *);  // CPython >= 3.9: older ones get no stacks
__attribute__((weak)) _frame *PyFrame_GetBack(_frame *);
__attribute__((weak)) int PyFrame_GetLineNumber(_frame *);
__attribute__((weak)) int PyFrame_GetLasti(_frame *);           // CPython >= 3.11
__attribute__((weak)) int PyCode_Addr2Line(_object *, int);     // CPython >= 3.10
__attribute__((weak)) _object *PyObject_GetAttrString(_object *, const char *);
__attribute__((weak)) const char *PyUnicode_AsUTF8(_object *);
__attribute__((weak)) void Py_IncRef(_object *);
__attribute__((weak)) void Py_DecRef(_object *);
__attribute__((weak)) void PyErr_Clear(void);
}

namespace tprobe::torch_capture {

namespace {

constexpr size_t max_frames = 128;

struct stack_entry {
  std::vector<std::string> lines;
  std::vector<const char *> pointers;  // into `lines`, which never changes after interning
};

struct stack_table {
  std::mutex mutex;
  std::deque<stack_entry> stacks;                   // id → lines; a deque never moves entries
  std::unordered_map<std::string, int> by_frames;   // (code, line)… bytes → id
  std::unordered_map<std::string, int> by_lines;    // joined lines → id
  std::unordered_map<std::string, std::vector<std::string>> sources;  // file → its lines
  std::vector<std::string> excluded;

  int add(std::vector<std::string> lines) {
    std::string joined;
    for (const auto &l : lines) joined.append(l).push_back('\x1e');
    auto [it, inserted] = by_lines.try_emplace(std::move(joined), static_cast<int>(stacks.size()));
    if (!inserted) return it->second;
    stack_entry &e = stacks.emplace_back();
    e.lines = std::move(lines);
    for (const auto &l : e.lines) e.pointers.push_back(l.c_str());
    return it->second;
  }

  const std::string &source_line(const std::string &file, int line) {
    static const std::string none;
    auto it = sources.find(file);
    if (it == sources.end()) {
      std::vector<std::string> text;
      std::ifstream in(file);
      for (std::string l; std::getline(in, l);) text.push_back(std::move(l));
      it = sources.emplace(file, std::move(text)).first;
    }
    if (line < 1 || static_cast<size_t>(line) > it->second.size()) return none;
    return it->second[static_cast<size_t>(line) - 1];
  }

  bool is_excluded(std::string_view file) const {
    for (const auto &dir : excluded)
      if (file.substr(0, dir.size()) == dir) return true;
    return false;
  }
};

stack_table &table() {
  static auto *t = new stack_table;  // never destroyed: operators may run during exit
  return *t;
}

bool ends_with(std::string_view text, std::string_view tail) {
  return text.size() >= tail.size() && text.substr(text.size() - tail.size()) == tail;
}

bool python_usable() {
  if (!Py_IsInitialized || !PyGILState_GetThisThreadState || !PyGILState_Ensure || !PyGILState_Release ||
      !PyEval_GetFrame || !PyFrame_GetCode || !PyFrame_GetBack || !PyFrame_GetLineNumber || !PyObject_GetAttrString || !PyUnicode_AsUTF8 || !Py_IncRef ||
      !Py_DecRef)
    return false;
  if (!Py_IsInitialized()) return false;
  if (_Py_IsFinalizing && _Py_IsFinalizing()) return false;
  if (Py_IsFinalizing && Py_IsFinalizing()) return false;
  // A thread Python has never seen (an autograd or worker thread) has no frames to show.
  return PyGILState_GetThisThreadState() != nullptr;
}

std::string attr_text(_object *object, const char *name) {
  _object *value = PyObject_GetAttrString(object, name);
  if (!value) {
    if (PyErr_Clear) PyErr_Clear();
    return "?";
  }
  const char *text = PyUnicode_AsUTF8(value);
  std::string result = text ? text : "?";
  if (!text && PyErr_Clear) PyErr_Clear();
  Py_DecRef(value);
  return result;
}

// Walks the frames with the GIL held. Returns the stack id.
int walk_frames() {
  struct frame_ref {
    _object *code;
    int line;  // or, by_offset, the instruction offset
  };
  // The frames are keyed by instruction offset where CPython tells it: a line number costs a
  // walk of the code's line table, per frame and operator, and is needed only for a new stack.
  const bool by_offset = PyFrame_GetLasti && PyCode_Addr2Line;
  // Kept from one walk to the next: the walk runs for every operator, and growing them anew
  // was a dozen allocations a walk. Reached through references taken once: in this shared
  // library each use of a thread_local is a __tls_get_addr call, three a frame otherwise.
  thread_local std::vector<frame_ref> frames_kept;
  thread_local std::string key_kept;
  std::vector<frame_ref> &frames = frames_kept;
  std::string &key = key_kept;
  frames.clear();
  key.clear();
  _frame *f = PyEval_GetFrame();  // borrowed
  if (f) Py_IncRef(reinterpret_cast<_object *>(f));
  while (f && frames.size() < max_frames) {
    _object *code = PyFrame_GetCode(f);  // new reference
    const int line = by_offset ? PyFrame_GetLasti(f) : PyFrame_GetLineNumber(f);
    _frame *back = PyFrame_GetBack(f);  // new reference or null
    Py_DecRef(reinterpret_cast<_object *>(f));
    f = back;
    if (!code) continue;
    frames.push_back({code, line});
    key.append(reinterpret_cast<const char *>(&code), sizeof code);
    key.append(reinterpret_cast<const char *>(&line), sizeof line);
  }
  if (f) Py_DecRef(reinterpret_cast<_object *>(f));

  auto &t = table();
  std::lock_guard lock(t.mutex);
  int id = -1;
  if (auto it = t.by_frames.find(key); it != t.by_frames.end()) {
    id = it->second;
  } else {
    std::vector<std::string> lines;
    for (const auto &fr : frames) {
      const std::string file = attr_text(fr.code, "co_filename");
      if (t.is_excluded(file)) continue;
      // torch.ops' Python entry, through which our own hooks call the capture (and any script a
      // torch.ops operator): not a line of the model, and msprobe's stacks have none.
      if (lines.empty() && ends_with(file, "/torch/_ops.py")) continue;
      const std::string func = attr_text(fr.code, "co_name");
      const int line = by_offset ? PyCode_Addr2Line(fr.code, fr.line) : fr.line;
      lines.push_back(stack_line(file, line, func, t.source_line(file, line)));
    }
    id = t.add(std::move(lines));
    // The key holds code object addresses: keep them alive so that no other code object can
    // ever take one of these addresses and be mistaken for it.
    for (const auto &fr : frames) Py_IncRef(fr.code);
    t.by_frames.emplace(std::move(key), id);
  }
  for (const auto &fr : frames) Py_DecRef(fr.code);
  return id;
}

}  // namespace

int python_stack_current() {
  if (!python_usable()) return -1;
  const int state = PyGILState_Ensure();
  const int id = walk_frames();
  PyGILState_Release(state);
  return id;
}

const std::vector<const char *> &python_stack_lines(int id) {
  static const std::vector<const char *> none;
  auto &t = table();
  std::lock_guard lock(t.mutex);
  if (id < 0 || static_cast<size_t>(id) >= t.stacks.size()) return none;
  return t.stacks[static_cast<size_t>(id)].pointers;
}

void python_stack_exclude(const std::string &dir) {
  if (dir.empty()) return;
  auto &t = table();
  std::lock_guard lock(t.mutex);
  t.excluded.push_back(dir);
}

}  // namespace tprobe::torch_capture
