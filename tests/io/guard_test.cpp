// The load's crash guard (io/src/guard.hpp) where the application around it is hostile to child processes: the
// loading process is a PID namespace's init (a container's entrypoint), the application ignores SIGCHLD or reaps
// every child in its own handler, eight of its threads are busy while it loads, and checkers end without a verdict.
// Each case runs on both of the guard's paths: the spawned checker (geomopt-inspect --check) and the forked child
// (GEOMOPT_IO_CHECKER set empty). A good file must load, a file that crashes HDF5 must give an Error with the caller
// alive and its tree unchanged.
#include "common.hpp"

#include <geomopt/io.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using Tree = std::map<std::string, Eigen::MatrixXd>;

Tree make_tree(double start) {
  Tree t{{"w", Eigen::MatrixXd(3, 2)}, {"b", Eigen::MatrixXd(4, 1)}};
  iotest::fill(t, start);
  return t;
}

const char* const kCrashFiles[] = {"crashes_hdf5_1_10.h5", "crashes_hdf5_1_10_b.h5"};

std::string data_file(const std::string& name) { return std::string(GEOMOPT_TEST_SOURCE_DIR) + "/io/data/" + name; }

// GEOMOPT_IO_CHECKER for one path of the guard, restored at the end of the scope.
class CheckerPath {
 public:
  explicit CheckerPath(const std::string& path) {
    if (const char* old = std::getenv("GEOMOPT_IO_CHECKER")) old_ = std::make_unique<std::string>(old);
    if (path == "forked")
      ::setenv("GEOMOPT_IO_CHECKER", "", 1);
    else
      ::unsetenv("GEOMOPT_IO_CHECKER");
  }
  CheckerPath(const CheckerPath&) = delete;
  CheckerPath& operator=(const CheckerPath&) = delete;
  ~CheckerPath() {
    if (old_)
      ::setenv("GEOMOPT_IO_CHECKER", old_->c_str(), 1);
    else
      ::unsetenv("GEOMOPT_IO_CHECKER");
  }

 private:
  std::unique_ptr<std::string> old_;
};

// A SIGCHLD disposition for the scope, as an application would set it.
std::atomic<int> g_reaped{0};
extern "C" void reap_every_child(int) {
  const int saved = errno;
  while (::waitpid(-1, nullptr, WNOHANG) > 0) g_reaped.fetch_add(1);
  errno = saved;
}
class SigchldDisposition {
 public:
  explicit SigchldDisposition(void (*handler)(int)) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGCHLD, &sa, &old_);
  }
  SigchldDisposition(const SigchldDisposition&) = delete;
  SigchldDisposition& operator=(const SigchldDisposition&) = delete;
  ~SigchldDisposition() { ::sigaction(SIGCHLD, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

// The guard's promises on one path: a good file loads bit for bit; each crash file gives an Error naming the crash
// (strict and lenient), the tree unchanged, this process alive.
void check_guard(const std::string& good, const Tree& saved) {
  Tree t = make_tree(100.0);
  geomopt::io::LoadReport report;
  REQUIRE_NOTHROW(report = geomopt::io::load(good, t));
  CHECK(report.complete());
  CHECK(iotest::snapshot(t) == iotest::snapshot(saved));
  Tree u = make_tree(100.0);
  const auto before = iotest::snapshot(u);
  // The spawned checker is a fresh process, where these files crash HDF5 1.10 every time. A child forked from this
  // process inherits HDF5's state, and there HDF5 may report the corruption instead (a metadata checksum error):
  // either way the load fails with an Error and leaves the tree as it was.
  const char* checker = std::getenv("GEOMOPT_IO_CHECKER");
  const bool forked = checker != nullptr && *checker == '\0';
  for (const std::string name : kCrashFiles) {
    CAPTURE(name);
    for (bool strict : {true, false}) {
      CAPTURE(strict);
      try {
        geomopt::io::load(data_file(name), u, {.strict = strict});
        FAIL("expected an Error");
      } catch (const geomopt::io::Error& e) {
        const std::string what = e.what();
        const bool crashed = what.find("crashed the HDF5 library") != std::string::npos;
        const bool damaged = what.find("the file is damaged") != std::string::npos;
        CHECK_MESSAGE((crashed || (forked && damaged)), what);
      }
      CHECK(iotest::snapshot(u) == before);
    }
  }
}

// A shell command's exit status (-1: killed by a signal) and its output, stdout and stderr together.
struct Run {
  int status;
  std::string out;
};
Run run(const std::string& command) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen((command + " 2>&1").c_str(), "r"), ::pclose);
  REQUIRE(pipe);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  const int status = ::pclose(pipe.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string self_exe() {
  std::string path(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size());
  REQUIRE(n > 0);
  path.resize(static_cast<std::size_t>(n));
  return path;
}

constexpr const char* kPid1Case = "a load as PID 1 of a PID namespace is guarded like any other";
constexpr const char* kPid1Env = "GEOMOPT_GUARD_TEST_PID1_FILE";

}  // namespace

TEST_CASE(kPid1Case) {
  // Run twice: from ctest, this case starts itself again as PID 1 of a new PID namespace (unshare) with the good
  // file's name in kPid1Env; that run, getpid() == 1, makes the checks. Its children see getppid() == 1 with their
  // parent alive, so no part of the guard may take that for an orphaned child; geomopt-inspect runs as PID 1 too.
  if (const char* good = std::getenv(kPid1Env)) {
    REQUIRE(::getpid() == 1);
    const Tree saved = make_tree(1.0);
    for (const std::string path : {"spawned", "forked"}) {
      CAPTURE(path);
      CheckerPath p(path);
      check_guard(good, saved);
    }
    return;
  }
  if (std::system("unshare --pid --fork --mount-proc true >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: unshare --pid --fork --mount-proc is not permitted here (needs root or user namespaces)");
    return;
  }
  iotest::ScratchDir dir("guard_pid1");
  const std::string good = dir.file("good.h5");
  geomopt::io::save(good, make_tree(1.0));
  const std::string unshare = "unshare --pid --fork --mount-proc ";
  {
    const Run r = run(std::string(kPid1Env) + "='" + good + "' " + unshare + "'" + self_exe() + "' --test-case='" +
                      kPid1Case + "' --no-version");
    CHECK_MESSAGE(r.status == 0, r.out);
    CHECK_MESSAGE(r.out.find("1 passed") != std::string::npos, r.out);  // the inner run did run this case
  }
  for (const std::string path : {"spawned", "forked"}) {
    CAPTURE(path);
    const std::string env = std::string(path) == "forked" ? "GEOMOPT_IO_CHECKER= " : "";
    const Run r = run(env + unshare + GEOMOPT_INSPECT + " '" + good + "'");
    CHECK_MESSAGE(r.status == 0, r.out);
    CHECK_MESSAGE(r.out.find("/params") != std::string::npos, r.out);
    for (const std::string name : kCrashFiles) {
      CAPTURE(name);
      const Run crash = run(env + unshare + GEOMOPT_INSPECT + " '" + data_file(name) + "'");
      CHECK(crash.status == 1);
      CHECK_MESSAGE(crash.out.find("crashed the HDF5 library") != std::string::npos, crash.out);
    }
  }
}

TEST_CASE("the guard holds when the application ignores SIGCHLD or reaps every child itself") {
  // With SIGCHLD ignored the kernel reaps the guard's child, and with a handler the application does: waitpid()
  // then fails with ECHILD. The verdict must still come, and a crash file must still end in an Error, not in a crash
  // of this process.
  iotest::ScratchDir dir("guard_sigchld");
  const std::string good = dir.file("good.h5");
  const Tree saved = make_tree(1.0);
  geomopt::io::save(good, saved);
  for (const std::string path : {"spawned", "forked"}) {
    CAPTURE(path);
    CheckerPath p(path);
    {
      SigchldDisposition ignore(SIG_IGN);
      check_guard(good, saved);
      // A file on which HDF5 loops: the child is killed at the deadline, with no status left to collect.
      Tree t = make_tree(100.0);
      CHECK_THROWS_AS(geomopt::io::load(data_file("hangs_hdf5_1_10.h5"), t, {.isolate_timeout = 1}),
                      geomopt::io::Error);
    }
    {
      g_reaped = 0;
      SigchldDisposition handler(reap_every_child);
      check_guard(good, saved);
      // Which of the two collects a child's status is a race; the verdict must not depend on its outcome.
      MESSAGE("children the application's handler reaped: " << g_reaped.load());
    }
  }
}

TEST_CASE("the verdict is the checker's report over the pipe: an exit without one is a crash") {
  // A checker that starts, then exits 0 or dies without reporting that it survived, fails the load (an exit
  // status of 0 alone does not pass a file); the message names the signal where this process could still see it.
  iotest::ScratchDir dir("guard_verdict");
  const std::string good = dir.file("good.h5");
  geomopt::io::save(good, make_tree(1.0));
  struct Script {
    const char* name;
    const char* body;
    const char* expect;
  };
  const Script scripts[] = {
      {"exits.sh", "printf s >&3\nexit 0\n", "(exit status 0, in a child process)"},
      {"dies.sh", "printf s >&3\nkill -SEGV $$\n", "(signal 11"},
  };
  const char* const old = std::getenv("GEOMOPT_IO_CHECKER");
  for (const Script& s : scripts) {
    const std::string script = s.name;
    CAPTURE(script);
    const std::string checker = dir.file(s.name);
    {
      std::ofstream out(checker);
      out << "#!/bin/sh\n" << s.body;
    }
    std::filesystem::permissions(checker, std::filesystem::perms::owner_all);
    ::setenv("GEOMOPT_IO_CHECKER", checker.c_str(), 1);
    Tree t = make_tree(100.0);
    const auto before = iotest::snapshot(t);
    for (bool ignore_sigchld : {false, true}) {
      CAPTURE(ignore_sigchld);
      std::unique_ptr<SigchldDisposition> ignore;
      if (ignore_sigchld) ignore = std::make_unique<SigchldDisposition>(SIG_IGN);
      try {
        geomopt::io::load(good, t);
        FAIL("expected an Error");
      } catch (const geomopt::io::Error& e) {
        const std::string what = e.what();
        CHECK_MESSAGE(what.find("crashed the HDF5 library") != std::string::npos, what);
        // Without a status to collect (SIGCHLD ignored), the message says only that no verdict came.
        if (!ignore_sigchld) CHECK_MESSAGE(what.find(s.expect) != std::string::npos, what);
        if (ignore_sigchld) CHECK_MESSAGE(what.find("ended without a verdict") != std::string::npos, what);
      }
      CHECK(iotest::snapshot(t) == before);
    }
  }
  if (old != nullptr)
    ::setenv("GEOMOPT_IO_CHECKER", old, 1);
  else
    ::unsetenv("GEOMOPT_IO_CHECKER");
}

TEST_CASE("loads stay guarded while eight threads of the caller spin and allocate") {
  // The forked path copies a process whose other threads may hold locks (the allocator's among them); the spawned
  // path runs nothing of this process in the child. Either way every load must end, with the right verdict.
  iotest::ScratchDir dir("guard_threads");
  const std::string good = dir.file("good.h5");
  const Tree saved = make_tree(1.0);
  geomopt::io::save(good, saved);
  std::atomic<bool> stop{false};
  std::atomic<long> work{0};
  std::vector<std::thread> busy;
  for (int i = 0; i < 8; ++i)
    busy.emplace_back([&, i] {
      std::vector<std::unique_ptr<double[]>> held(16);
      unsigned k = static_cast<unsigned>(i);
      while (!stop.load(std::memory_order_relaxed)) {
        k = k * 1664525u + 1013904223u;
        held[k % held.size()] = std::make_unique<double[]>(1 + k % 4096);
        work.fetch_add(1, std::memory_order_relaxed);
      }
    });
  for (const std::string path : {"spawned", "forked"}) {
    CAPTURE(path);
    CheckerPath p(path);
    check_guard(good, saved);
  }
  stop = true;
  for (auto& t : busy) t.join();
  CHECK(work.load() > 0);
}

TEST_CASE("describe and load refuse a check timeout that is not a positive number of seconds, naming it") {
  iotest::ScratchDir dir("guard_timeout");
  const std::string good = dir.file("good.h5");
  geomopt::io::save(good, make_tree(1.0));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {nan, -1.0, 0.0, -std::numeric_limits<double>::infinity()}) {
    CAPTURE(bad);
    try {
      geomopt::io::describe(good, bad);
      FAIL("expected an Error");
    } catch (const geomopt::io::Error& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find("check_timeout must be a positive number of seconds") != std::string::npos, what);
    }
    Tree t = make_tree(100.0);
    const auto before = iotest::snapshot(t);
    try {
      geomopt::io::load(good, t, {.isolate_timeout = bad});
      FAIL("expected an Error");
    } catch (const geomopt::io::Error& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find("isolate_timeout must be a positive number of seconds") != std::string::npos, what);
    }
    CHECK(iotest::snapshot(t) == before);
  }
  // Infinity is no limit, and a good file passes.
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(geomopt::io::describe(good, inf).find("/params") != std::string::npos);
  Tree t = make_tree(100.0);
  CHECK(geomopt::io::load(good, t, {.isolate_timeout = inf}).complete());
  CHECK(iotest::snapshot(t) == iotest::snapshot(make_tree(1.0)));
}

namespace {
using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
struct Large {
  std::map<std::string, Eigen::MatrixXf> col;  // transposed on the way in, panel by panel
  std::map<std::string, RowMatrixXf> row;      // read straight into the tree
  Eigen::VectorXd v;
  GEOMOPT_PTREE(col, row, v)
};
// Every entry distinct (k / 4 past `start`, k counting through all leaves), filled through the raw storage: the
// sanitizer build runs this at -O0.
template <class M>
void fill_raw(M& m, float& next) {
  for (Eigen::Index k = 0; k < m.size(); ++k, next += 0.25f) m.data()[k] = next;
}
template <class M>
bool same_bits(const M& a, const M& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(typename M::Scalar) * static_cast<std::size_t>(a.size())) == 0;
}
Large make_large(float start) {
  Large t;
  for (int i = 0; i < 4; ++i) {
    t.col["c" + std::to_string(i)] = Eigen::MatrixXf(1024 + 3 * i, 1000 + i);
    t.row["r" + std::to_string(i)] = RowMatrixXf(997 + i, 1024 + 5 * i);
  }
  t.v = Eigen::VectorXd(1 << 20);
  float next = start;
  for (auto& [k, m] : t.col) fill_raw(m, next);
  for (auto& [k, m] : t.row) fill_raw(m, next);
  for (Eigen::Index k = 0; k < t.v.size(); ++k) t.v[k] = start - 0.5 * static_cast<double>(k);
  return t;
}
bool same_bits(const Large& a, const Large& b) {
  bool same = a.col.size() == b.col.size() && a.row.size() == b.row.size() && same_bits(a.v, b.v);
  for (const auto& [k, m] : a.col) same = same && same_bits(m, b.col.at(k));
  for (const auto& [k, m] : a.row) same = same && same_bits(m, b.row.at(k));
  return same;
}
}  // namespace

TEST_CASE("a load large enough to share its blocks among reader threads is bit for bit") {
  // About 40 MB of contiguous data: more than one reader's share (16 MB), so every core up to four reads blocks.
  iotest::ScratchDir dir("guard_large");
  const std::string file = dir.file("large.h5");
  const Large saved = make_large(1.0f);
  geomopt::io::save(file, saved, {.durable = false});
  for (bool isolate : {true, false}) {
    CAPTURE(isolate);
    Large t = make_large(-5.0f);
    CHECK_FALSE(same_bits(t, saved));
    CHECK(geomopt::io::load(file, t, {.isolate = isolate}).complete());
    CHECK(same_bits(t, saved));
  }
}
