// Tests for core/safe_path: msprobe's path rules, 0750/0640 modes, symbolic-link refusal and
// atomic replacement.
#include "safe_path.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "errors.h"

namespace tprobe {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string &path, const std::string &content) {
  std::ofstream(path, std::ios::binary) << content;
}

mode_t mode_of(const std::string &path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

std::set<std::string> names_in(const std::string &dir) {
  std::set<std::string> names;
  for (const auto &e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Expect `fn` to throw E whose message contains `fragment`.
template <typename E, typename F>
void expect_error(F &&fn, const std::string &fragment) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one containing: " << fragment;
  } catch (const E &e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

class SafePath : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tprobe_safe_path_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = absolute_normal_path(tmpl);
    old_umask_ = ::umask(022);
  }
  void TearDown() override {
    ::umask(old_umask_);
    fs::remove_all(dir_);
  }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  std::string dir_;
  mode_t old_umask_ = 022;
};

TEST_F(SafePath, AbsoluteNormalPath) {
  EXPECT_EQ(absolute_normal_path("/a/./b/../c/"), "/a/c");
  EXPECT_EQ(absolute_normal_path("/"), "/");
  EXPECT_EQ(absolute_normal_path("//x//y"), "/x/y");
  const std::string cwd = fs::current_path().string();
  EXPECT_EQ(absolute_normal_path("rel/dir"), cwd == "/" ? "/rel/dir" : cwd + "/rel/dir");
  EXPECT_THROW((void)absolute_normal_path(""), usage_error);
}

TEST_F(SafePath, CheckCreateAcceptsTheAllowedCharacters) {
  EXPECT_EQ(path_check_create("/tmp/dump_path/step-0/rank.1", "dump_path"), "/tmp/dump_path/step-0/rank.1");
  EXPECT_EQ(path_check_create("/tmp/x/../y/", "dump_path"), "/tmp/y");
  EXPECT_EQ(path_check_create("/" + std::string(255, 'a'), "dump_path"), "/" + std::string(255, 'a'));
}

TEST_F(SafePath, CheckCreateRejectsBadPaths) {
  try {
    (void)path_check_create("/tmp/a b", "dump_path");
    ADD_FAILURE() << "no error";
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()), "dump_path \"/tmp/a b\": contains characters outside [a-zA-Z0-9_./-]");
  }
  for (const std::string bad : {"/tmp/a+b", "/tmp/中文", "/tmp/a:b", "/tmp/a$b", "/tmp/a\nb", "/tmp/a~"})
    EXPECT_THROW((void)path_check_create(bad, "dump_path"), usage_error) << bad;
  expect_error<usage_error>([] { (void)path_check_create("", "output_path"); }, "output_path \"\": is empty");
  expect_error<usage_error>([] { (void)path_check_create("/" + std::string(256, 'a'), "dump_path"); },
                            "is longer than 255 characters");
  std::string very_long;
  for (int i = 0; i < 20; ++i) very_long += "/" + std::string(250, 'b');
  expect_error<usage_error>([&] { (void)path_check_create(very_long, "dump_path"); },
                            "is longer than 4096 characters");
}

TEST_F(SafePath, CheckCreateAppliesToTheAbsolutePath) {
  // msprobe FAQ: a relative dump_path fails when the current directory holds a '+'.
  const std::string odd = path("abc++");
  ASSERT_TRUE(fs::create_directory(odd));
  const fs::path old_cwd = fs::current_path();
  fs::current_path(odd);
  try {
    (void)path_check_create("dump", "dump_path");
    ADD_FAILURE() << "no error";
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()),
              "dump_path \"" + odd + "/dump\": contains characters outside [a-zA-Z0-9_./-]");
  }
  fs::current_path(old_cwd);
}

TEST_F(SafePath, MkdirsCreatesTheTreeWithMode0750WhateverTheUmask) {
  for (const mode_t mask : {mode_t{0}, mode_t{077}, mode_t{022}}) {
    ::umask(mask);
    const std::string root = path("dump" + std::to_string(mask) + "/nested/root");
    safe_mkdirs(root, "step0/rank0/dump_tensor_data");
    for (const std::string &d : {path("dump" + std::to_string(mask)), path("dump" + std::to_string(mask) + "/nested"),
                                root, root + "/step0", root + "/step0/rank0", root + "/step0/rank0/dump_tensor_data"}) {
      EXPECT_TRUE(fs::is_directory(d)) << d;
      EXPECT_EQ(mode_of(d), 0750u) << d << " umask " << mask;
    }
  }
  ::umask(022);
  // Idempotent; existing directories keep their mode.
  const std::string root = path("existing");
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(root.c_str(), 0755), 0);
  safe_mkdirs(root, "./step1//rank");
  safe_mkdirs(root, "step1/rank");
  safe_mkdirs(root);
  EXPECT_EQ(mode_of(root), 0755u);
  EXPECT_EQ(mode_of(root + "/step1/rank"), 0750u);
}

TEST_F(SafePath, MkdirsRefusesSymlinksInsideTheTree) {
  const std::string root = path("dump");
  const std::string elsewhere = path("elsewhere");
  safe_mkdirs(root);
  ASSERT_TRUE(fs::create_directory(elsewhere));
  ASSERT_EQ(::symlink(elsewhere.c_str(), (root + "/step0").c_str()), 0);
  try {
    safe_mkdirs(root, "step0/rank0");
    ADD_FAILURE() << "no error";
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()), root + "/step0: is a symbolic link; refusing to follow it");
  }
  EXPECT_TRUE(fs::is_empty(elsewhere));

  // The root itself must not be a link either…
  const std::string link_root = path("link_root");
  ASSERT_EQ(::symlink(elsewhere.c_str(), link_root.c_str()), 0);
  expect_error<usage_error>([&] { safe_mkdirs(link_root, "step0"); }, "is a symbolic link");
  EXPECT_TRUE(fs::is_empty(elsewhere));
  // …but its ancestors may be (e.g. /home → /data/home).
  safe_mkdirs(link_root + "/dump", "step0");
  EXPECT_TRUE(fs::is_directory(elsewhere + "/dump/step0"));

  // A dangling link is refused as well, and nothing is created through it.
  ASSERT_EQ(::symlink(path("nowhere").c_str(), (root + "/step1").c_str()), 0);
  expect_error<usage_error>([&] { safe_mkdirs(root, "step1/rank0"); }, "is a symbolic link");
  EXPECT_FALSE(fs::exists(path("nowhere")));
}

TEST_F(SafePath, MkdirsRejectsFilesAndBadRelatives) {
  const std::string root = path("dump");
  safe_mkdirs(root);
  write_file(root + "/step0", "x");
  expect_error<usage_error>([&] { safe_mkdirs(root, "step0/rank0"); }, root + "/step0: exists and is not a directory");
  expect_error<usage_error>([&] { safe_mkdirs(root, "../escape"); }, "must not contain \"..\"");
  expect_error<usage_error>([&] { safe_mkdirs(root, "/abs"); }, "must be relative");
  EXPECT_FALSE(fs::exists(path("escape")));
}

TEST_F(SafePath, OpenForWriteSetsMode0640AndTruncates) {
  ::umask(077);
  const std::string file = path("tensor.npy");
  int fd = safe_open_for_write(file);
  ASSERT_GE(fd, 0);
  safe_write_all(fd, "hello", 5, file);
  ::close(fd);
  EXPECT_EQ(mode_of(file), 0640u);
  EXPECT_EQ(read_file(file), "hello");

  ASSERT_EQ(::chmod(file.c_str(), 0666), 0);
  fd = safe_open_for_write(file);
  safe_write_all(fd, "hi", 2, file);
  ::close(fd);
  EXPECT_EQ(mode_of(file), 0640u);
  EXPECT_EQ(read_file(file), "hi");
}

TEST_F(SafePath, OpenForWriteRefusesLinksAndSpecialFiles) {
  const std::string victim = path("victim");
  write_file(victim, "keep");
  const std::string link = path("link.npy");
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  expect_error<usage_error>([&] { (void)safe_open_for_write(link); }, link + ": is a symbolic link");
  EXPECT_EQ(read_file(victim), "keep");

  const std::string real_dir = path("real");
  ASSERT_TRUE(fs::create_directory(real_dir));
  const std::string dir_link = path("dir_link");
  ASSERT_EQ(::symlink(real_dir.c_str(), dir_link.c_str()), 0);
  expect_error<usage_error>([&] { (void)safe_open_for_write(dir_link + "/f.npy"); }, dir_link + ": is a symbolic link");
  EXPECT_TRUE(fs::is_empty(real_dir));

  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_ANY_THROW((void)safe_open_for_write(fifo));  // refused at once, never blocks
  expect_error<system_error>([&] { (void)safe_open_for_write(path("no/such/dir/f")); }, "unable to open directory");
}

// safe_dir: a directory opened once, files created in it by name with safe_open_for_write's
// guarantees (the writer's dump_tensor_data/).
TEST_F(SafePath, DirOpensFilesWithMode0640AndTruncatesExistingOnes) {
  ::umask(077);
  const std::string sub = path("dump_tensor_data");
  ASSERT_TRUE(fs::create_directory(sub));
  const safe_dir dir(sub);
  EXPECT_EQ(dir.path(), sub);
  EXPECT_EQ(dir.file_path("a.npy"), sub + "/a.npy");
  int fd = dir.open_for_write("a.npy");  // new: created, mode set despite the umask
  safe_write_all(fd, "hello", 5, dir.file_path("a.npy"));
  ::close(fd);
  EXPECT_EQ(mode_of(sub + "/a.npy"), 0640u);
  EXPECT_EQ(read_file(sub + "/a.npy"), "hello");
  ASSERT_EQ(::chmod((sub + "/a.npy").c_str(), 0666), 0);
  fd = dir.open_for_write("a.npy");  // existing (a rerun): truncated, mode set again
  safe_write_all(fd, "hi", 2, dir.file_path("a.npy"));
  ::close(fd);
  EXPECT_EQ(mode_of(sub + "/a.npy"), 0640u);
  EXPECT_EQ(read_file(sub + "/a.npy"), "hi");
  dir.remove("a.npy");
  EXPECT_TRUE(fs::is_empty(sub));
  ::umask(022);
}

TEST_F(SafePath, DirRefusesLinksSpecialFilesAndPaths) {
  const std::string real_dir = path("real");
  ASSERT_TRUE(fs::create_directory(real_dir));
  const std::string dir_link = path("dir_link");
  ASSERT_EQ(::symlink(real_dir.c_str(), dir_link.c_str()), 0);
  expect_error<usage_error>([&] { safe_dir d(dir_link); }, dir_link + ": is a symbolic link");
  write_file(path("plain"), "x");
  expect_error<usage_error>([&] { safe_dir d(path("plain")); }, path("plain") + ": exists and is not a directory");
  expect_error<system_error>([&] { safe_dir d(path("missing")); }, "unable to open directory");

  const safe_dir dir(real_dir);
  const std::string victim = path("victim");
  write_file(victim, "keep");
  ASSERT_EQ(::symlink(victim.c_str(), (real_dir + "/link.npy").c_str()), 0);
  expect_error<usage_error>([&] { (void)dir.open_for_write("link.npy"); }, real_dir + "/link.npy: is a symbolic link");
  EXPECT_EQ(read_file(victim), "keep");
  ASSERT_EQ(::symlink((real_dir + "/nowhere").c_str(), (real_dir + "/dangling.npy").c_str()), 0);
  expect_error<usage_error>([&] { (void)dir.open_for_write("dangling.npy"); }, "is a symbolic link");
  EXPECT_FALSE(fs::exists(real_dir + "/nowhere"));
  ASSERT_EQ(::mkfifo((real_dir + "/fifo").c_str(), 0600), 0);
  EXPECT_ANY_THROW((void)dir.open_for_write("fifo"));  // refused at once, never blocks
  for (const char *bad : {"", ".", "..", "a/b.npy", "../escape.npy"})
    expect_error<usage_error>([&] { (void)dir.open_for_write(bad); }, "is not a file name in " + real_dir);
  EXPECT_FALSE(fs::exists(path("escape.npy")));
}

TEST_F(SafePath, AtomicWriteReplacesContentAndLeavesNoTemporaryFiles) {
  ::umask(0);
  const std::string target = path("dump.json");
  atomic_write_file(target, "{}");
  EXPECT_EQ(read_file(target), "{}");
  EXPECT_EQ(mode_of(target), 0640u);
  atomic_write_file(target, "{\n \"task\": \"statistics\"\n}", true);
  EXPECT_EQ(read_file(target), "{\n \"task\": \"statistics\"\n}");
  EXPECT_EQ(mode_of(target), 0640u);
  const std::string big(3 << 20, 'x');
  atomic_write_file(target, big);
  EXPECT_EQ(read_file(target), big);
  atomic_write_file(path("empty.json"), "");
  EXPECT_EQ(read_file(path("empty.json")), "");
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"dump.json", "empty.json"}));
}

TEST_F(SafePath, AtomicWriteReplacesASymlinkInsteadOfFollowingIt) {
  const std::string victim = path("victim");
  write_file(victim, "keep");
  const std::string target = path("stack.json");
  ASSERT_EQ(::symlink(victim.c_str(), target.c_str()), 0);
  atomic_write_file(target, "[]");
  EXPECT_EQ(read_file(victim), "keep");
  EXPECT_FALSE(fs::is_symlink(target));
  EXPECT_EQ(read_file(target), "[]");
}

TEST_F(SafePath, AtomicWriteRefusesASymlinkedParentAndCleansUpOnFailure) {
  const std::string real_dir = path("real");
  ASSERT_TRUE(fs::create_directory(real_dir));
  const std::string dir_link = path("rank0");
  ASSERT_EQ(::symlink(real_dir.c_str(), dir_link.c_str()), 0);
  expect_error<usage_error>([&] { atomic_write_file(dir_link + "/dump.json", "{}"); },
                            dir_link + ": is a symbolic link");
  EXPECT_TRUE(fs::is_empty(real_dir));

  // rename() over a directory fails: a system_error, and the temporary file is gone.
  ASSERT_TRUE(fs::create_directory(real_dir + "/dump.json"));
  expect_error<system_error>([&] { atomic_write_file(real_dir + "/dump.json", "{}"); }, "unable to rename");
  EXPECT_EQ(names_in(real_dir), (std::set<std::string>{"dump.json"}));
}

TEST_F(SafePath, AtomicWriteHandlesMaximalNames) {
  const std::string name(255, 'n');
  atomic_write_file(path(name), "x");
  EXPECT_EQ(read_file(path(name)), "x");
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{name}));
}

TEST_F(SafePath, PreparedFileCreatesItsTemporaryFirstAndRenamesItOnCommit) {
  ::umask(0);
  const std::string target = path("dump.json");
  write_file(target, "old");
  prepared_file prepared(target);
  ASSERT_FALSE(prepared.empty());
  EXPECT_EQ(prepared.path(), target);
  // The temporary exists before the content is known; the target is untouched until the commit.
  const auto names = names_in(dir_);
  ASSERT_EQ(names.size(), 2u);
  const std::string temporary = *std::find_if(names.begin(), names.end(), [](const std::string &n) { return n != "dump.json"; });
  EXPECT_EQ(temporary.rfind(".dump.json.tmp.", 0), 0u) << temporary;
  EXPECT_EQ(mode_of(path(temporary)), 0640u);
  EXPECT_EQ(read_file(target), "old");

  prepared_file moved = std::move(prepared);  // the temporary goes with it
  EXPECT_TRUE(prepared.empty());
  moved.commit("{}");
  EXPECT_TRUE(moved.empty());
  EXPECT_EQ(read_file(target), "{}");
  EXPECT_EQ(mode_of(target), 0640u);
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"dump.json"}));
  EXPECT_THROW(moved.commit("again"), std::logic_error);
  EXPECT_EQ(read_file(target), "{}");
}

TEST_F(SafePath, APreparedFileNeverCommittedOrFailingLeavesNothing) {
  const std::string target = path("stack.json");
  { prepared_file unused(target); }
  EXPECT_TRUE(fs::is_empty(dir_));

  prepared_file assigned(target);
  assigned = prepared_file(path("construct.json"));  // the first temporary goes at once
  EXPECT_EQ(names_in(dir_).size(), 1u);
  assigned = prepared_file();
  EXPECT_TRUE(fs::is_empty(dir_));

  // A rename that fails (over a directory) names both paths, and the temporary is gone.
  ASSERT_TRUE(fs::create_directory(target));
  prepared_file blocked(target);
  expect_error<system_error>([&] { blocked.commit("[]"); }, "unable to rename");
  EXPECT_TRUE(blocked.empty());  // a second commit cannot write into what is gone
  EXPECT_EQ(names_in(dir_), (std::set<std::string>{"stack.json"}));
  fs::remove(target);

  // A write that fails part-way (the file size limit; SIGXFSZ ignored, so write() says EFBIG):
  // the partial temporary goes at once, and the file written again afterwards is whole.
  const std::string data = path("dump.json");
  prepared_file partial(data);
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string big(3 * 4096, 'x');
  expect_error<system_error>([&] { partial.commit(big); }, "unable to write " + dir_ + "/.dump.json.tmp.");
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(partial.empty());
  EXPECT_TRUE(fs::is_empty(dir_));
  atomic_write_file(data, big);
  EXPECT_EQ(read_file(data), big);
  fs::remove(data);

  // Where the temporary cannot be made, the constructor says so and leaves nothing.
  const std::string locked = path("locked");
  ASSERT_TRUE(fs::create_directory(locked));
  ASSERT_EQ(::chmod(locked.c_str(), 0500), 0);
  if (::geteuid() != 0) {  // root writes anywhere
    expect_error<system_error>([&] { prepared_file(locked + "/dump.json"); }, "unable to create " + locked + "/.dump.json.tmp.");
    EXPECT_TRUE(fs::is_empty(locked));
  }
  expect_error<system_error>([&] { prepared_file(path("missing/dump.json")); }, "unable to open directory " + path("missing"));
}

}  // namespace
}  // namespace tprobe
