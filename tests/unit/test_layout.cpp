// The house shows its parts (issue 17 item 6): stream stages live in stages/stream/<stage>/,
// offline tools over files in tools/<tool>/, and no stage or tool includes a header from another
// one's folder: what two of them share is a library (core/, core/compare/, transport/, capture/,
// stages/common/). This test resolves every quoted #include of those folders the way the compiler
// does (the file's own folder first, then tprobe_stages' include roots in order) and names each
// one that lands in another stage's or tool's folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace fs = std::filesystem;

namespace {

// The folder of a stage or tool that `file` lies in ("stages/stream/stats"), or "" for a library.
std::string owner(const fs::path &root, const fs::path &file) {
  const fs::path rel = file.lexically_relative(root);
  auto it = rel.begin();
  std::vector<std::string> parts;
  for (; it != rel.end(); ++it) parts.push_back(it->string());
  if (parts.size() >= 4 && parts[0] == "stages" && parts[1] == "stream") return "stages/stream/" + parts[2];
  if (parts.size() >= 3 && parts[0] == "tools") return "tools/" + parts[1];
  return "";
}

std::vector<fs::path> sources_under(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".h" || e.path().extension() == ".cpp")) out.push_back(e.path());
  return out;
}

}  // namespace

TEST(Layout, stages_and_tools_sit_in_their_folders) {
  const fs::path root = tprobe::test::source_dir();
  for (const char *folder : {"stages/stream/stats", "stages/stream/writer", "stages/stream/tap", "stages/stream/compare_live",
                             "stages/stream/nan_live", "stages/stream/gradsim_live", "stages/stream/kit",
                             "tools/compare", "tools/nan_analyze", "tools/gradsim", "tools/report", "core/compare"})
    EXPECT_TRUE(fs::exists(root / folder / "CMakeLists.txt")) << folder;
  EXPECT_FALSE(fs::exists(root / "stages/compare")) << "the compare tool is tools/compare, its library core/compare";
}

TEST(Layout, no_stage_or_tool_includes_another_ones_headers) {
  const fs::path root = tprobe::test::source_dir();
  const std::vector<fs::path> roots{root / "stages", root / "stages/common", root / "stages/stream", root / "tools",
                                    root / "launcher", root / "core", root / "core/compare", root / "transport",
                                    root / "capture"};
  const std::regex include_line(R"(^\s*#\s*include\s+"([^"]+)\")");
  size_t checked = 0;
  std::vector<fs::path> files = sources_under(root / "stages/stream");
  for (const auto &f : sources_under(root / "tools")) files.push_back(f);
  for (const auto &file : files) {
    const std::string mine = owner(root, file);
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      fs::path resolved = file.parent_path() / m[1].str();
      for (size_t i = 0; !fs::exists(resolved) && i < roots.size(); ++i) resolved = roots[i] / m[1].str();
      if (!fs::exists(resolved)) continue;  // a system or generated header
      ++checked;
      const std::string theirs = owner(root, fs::weakly_canonical(resolved));
      EXPECT_TRUE(theirs.empty() || theirs == mine)
          << file.lexically_relative(root).string() << " includes \"" << m[1] << "\" from " << theirs;
    }
  }
  EXPECT_GT(checked, 50u);  // the scan saw the tree, not an empty folder
}

// Transport is the record and its protocol, not a stage: the stage runtime (stage_io, the signal
// handlers and the stop flag) is stages/common/stage_io.h, and nothing in transport/ includes a
// header of stages/, tools/ or launcher/ or names that runtime.
TEST(Layout, transport_knows_no_stage) {
  const fs::path root = tprobe::test::source_dir();
  const std::regex include_line(R"(^\s*#\s*include\s+"([^"]+)\")");
  const std::regex stage_names(R"(\b(stage_io|stop_requested|request_stop|stage_install_signal_handlers)\b)");
  size_t files = 0;
  for (const auto &file : sources_under(root / "transport")) {
    ++files;
    std::ifstream in(file);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      const std::string where = file.lexically_relative(root).string() + ":" + std::to_string(n);
      std::smatch m;
      if (std::regex_search(line, m, include_line)) {
        const std::string header = m[1].str();
        EXPECT_TRUE(fs::exists(root / "transport" / header) || !fs::exists(root / "stages/common" / header))
            << where << " includes the stage runtime's \"" << header << "\"";
      }
      const auto code = line.substr(0, line.find("//"));  // comments may point a reader there
      EXPECT_FALSE(std::regex_search(code, stage_names)) << where << ": " << line;
    }
  }
  EXPECT_GE(files, 5u);
}
