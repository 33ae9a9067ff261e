// A fixed team of threads that runs one function on every member and waits for all: the caller is member 0, so a
// team of one starts no thread. Dispatching allocates nothing (a function pointer and a context), which keeps an
// optimizer step allocation-free with any number of threads. An exception thrown by a member is rethrown to the
// caller after every member has finished.
//
// run may be called from several threads at once: the calls are serialized (one dispatch owns the team from its
// start to its last member's return), so each caller's function runs whole on the team and no caller waits on
// another's members. A member must not call run on its own pool (it would wait for itself).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace geomopt::detail {

class ThreadPool {
 public:
  explicit ThreadPool(int size) : size_(size < 1 ? 1 : size), errors_(static_cast<std::size_t>(size_)) {
    workers_.reserve(static_cast<std::size_t>(size_ - 1));
    for (int id = 1; id < size_; ++id) workers_.emplace_back([this, id] { serve(id); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int size() const noexcept { return size_; }

  /// Calls f(member) for member = 0 .. size() - 1, member 0 on this thread, and returns when all have returned.
  template <class F>
  void run(F& f) {
    if (size_ == 1) {
      f(0);
      return;
    }
    std::lock_guard<std::mutex> dispatch(dispatch_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = [](void* ctx, int member) { (*static_cast<F*>(ctx))(member); };
      context_ = &f;
      pending_ = size_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    execute(0);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return pending_ == 0; });
    }
    for (auto& e : errors_) {
      if (e) {
        std::exception_ptr first = e;
        for (auto& x : errors_) x = nullptr;
        std::rethrow_exception(first);
      }
    }
  }

 private:
  void execute(int member) {
    try {
      task_(context_, member);
    } catch (...) {
      errors_[static_cast<std::size_t>(member)] = std::current_exception();
    }
  }

  void serve(int member) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      execute(member);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  int size_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> workers_;
  std::mutex dispatch_;  // held by the one run that owns the team
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  void (*task_)(void*, int) = nullptr;
  void* context_ = nullptr;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace geomopt::detail
