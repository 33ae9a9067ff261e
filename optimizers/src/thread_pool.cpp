// The team behind detail::ThreadPool (optimizers/detail/thread_pool.hpp).
#include "geomopt/optimizers/detail/thread_pool.hpp"

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace geomopt::detail {

struct ThreadPool::Team {
  explicit Team(int size) : errors(static_cast<std::size_t>(size)) {}

  void execute(int member) {
    try {
      task(context, member);
    } catch (...) {
      errors[static_cast<std::size_t>(member)] = std::current_exception();
    }
  }

  void serve(int member) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
      }
      execute(member);
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (--pending == 0) done.notify_one();
      }
    }
  }

  std::vector<std::exception_ptr> errors;
  std::vector<std::thread> workers;
  std::mutex dispatch;  // held by the one run that owns the team
  std::mutex mutex;
  std::condition_variable wake, done;
  void (*task)(void*, int) = nullptr;
  void* context = nullptr;
  int pending = 0;
  std::uint64_t generation = 0;
  bool stop = false;
};

ThreadPool::ThreadPool(int size) : size_(size < 1 ? 1 : size), team_(std::make_unique<Team>(size_)) {
  team_->workers.reserve(static_cast<std::size_t>(size_ - 1));
  for (int id = 1; id < size_; ++id) team_->workers.emplace_back([team = team_.get(), id] { team->serve(id); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(team_->mutex);
    team_->stop = true;
  }
  team_->wake.notify_all();
  for (auto& w : team_->workers) w.join();
}

void ThreadPool::dispatch(void (*task)(void*, int), void* context) {
  Team& t = *team_;
  std::lock_guard<std::mutex> owner(t.dispatch);
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    t.task = task;
    t.context = context;
    t.pending = size_ - 1;
    ++t.generation;
  }
  t.wake.notify_all();
  t.execute(0);
  {
    std::unique_lock<std::mutex> lock(t.mutex);
    t.done.wait(lock, [&] { return t.pending == 0; });
  }
  for (auto& e : t.errors) {
    if (e) {
      std::exception_ptr first = e;
      for (auto& x : t.errors) x = nullptr;
      std::rethrow_exception(first);
    }
  }
}

}  // namespace geomopt::detail
