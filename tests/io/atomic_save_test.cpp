// Atomic saving (io/tree.hpp, io/checkpoint.hpp): a writer killed with SIGKILL at random moments while it replaces
// a checkpoint leaves, under the target's name, a complete checkpoint: the old one or the new one, never a mixture.
#include "common.hpp"

#include <geomopt/io.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

namespace {

struct Net {
  std::vector<Eigen::MatrixXf> layers;
  pt::Buffer<Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>> generation;
  GEOMOPT_PTREE(layers, generation)
};

// About 4 MB of parameters and 4 MB of state, so that one save takes milliseconds and a kill lands inside it.
Net make_net() {
  Net n;
  for (int i = 0; i < 8; ++i) n.layers.push_back(Eigen::MatrixXf::Zero(256, 512));
  n.generation = pt::Buffer<Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>>{
      Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>::Zero(1)};
  return n;
}

void set_generation(Net& n, std::int64_t g) {
  for (auto& l : n.layers) l.setConstant(static_cast<float>(g));
  (*n.generation)(0) = g;
}

using State = iotest::FakeState<float, Net>;

// A momentum buffer per layer, like SGD's.
State make_state() {
  State s;
  s.kind = "SGD";
  s.hp = {{"lr", 0.1}, {"momentum", 0.9}};
  for (int i = 0; i < 8; ++i)
    s.slots.push_back({"layers." + std::to_string(i), "momentum_buffer", Eigen::MatrixXf::Zero(256, 512)});
  return s;
}

void set_generation(State& s, std::int64_t g) {
  for (auto& slot : s.slots) slot.data.setConstant(static_cast<float>(-g));
  s.step = g;
}

// Every number of the checkpoint belongs to one generation, and the state to the same one.
std::int64_t consistent_generation(const std::string& file) {
  Net n = make_net();
  State state = make_state();
  geomopt::io::load_checkpoint(file, n, state);
  const std::int64_t g = (*n.generation)(0);
  for (const auto& l : n.layers) REQUIRE((l.array() == static_cast<float>(g)).all());
  for (const auto& slot : state.slots) REQUIRE((slot.data.array() == static_cast<float>(-g)).all());
  REQUIRE(state.step_count() == g);
  return g;
}

}  // namespace

TEST_CASE("a writer killed in the middle of replacing a checkpoint leaves the old or the new one") {
  iotest::ScratchDir dir("kill");
  const std::string target = dir.file("ckpt.h5");
  {
    Net n = make_net();
    set_generation(n, 0);
    State state = make_state();
    set_generation(state, 0);
    geomopt::io::save_checkpoint(target, n, state);
  }
  std::mt19937 rng(12345);
  std::set<std::int64_t> seen;
  std::int64_t last = 0;
  constexpr int kKills = 12;
  for (int round = 0; round < kKills; ++round) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // Saves generation after generation over the target until killed; durable saves in every other round.
      Net n = make_net();
      State state = make_state();
      for (std::int64_t g = last + 1;; ++g) {
        set_generation(n, g);
        set_generation(state, g);
        geomopt::io::save_checkpoint(target, n, state, {}, {.durable = round % 2 == 0});
      }
    }
    if (round % 3 == 2) {
      // Once the writer has replaced the file (a new inode under the name), kill it somewhere in its next save.
      const auto inode = [&] {
        struct stat st {};
        return ::stat(target.c_str(), &st) == 0 ? st.st_ino : ino_t{0};
      };
      const ino_t before = inode();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (inode() == before && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      // Then wait for its next temporary file: the kill lands inside that save, early or late.
      const auto temporaries = [&] {
        std::set<std::string> names;
        for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
          if (entry.path().filename().string() != "ckpt.h5") names.insert(entry.path().filename().string());
        return names;
      };
      const auto old_temporaries = temporaries();
      while (temporaries() == old_temporaries && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % 60000));
    }
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status));
    const std::int64_t g = consistent_generation(target);
    CHECK(g >= last);  // never older than what was there before the writer started
    seen.insert(g);
    MESSAGE("round " << round << ": generation " << g);
    last = g;
  }
  // Writers did replace the file between kills: new generations were seen.
  CHECK(seen.size() > 1);
  // What a killed writer leaves is its temporary file, never a partial target; and there are such files, so kills
  // did land inside saves.
  int temporaries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    CHECK((name == "ckpt.h5" || name.rfind(".ckpt.h5.tmp.", 0) == 0));
    temporaries += name != "ckpt.h5";
  }
  CHECK(temporaries > 0);
}
