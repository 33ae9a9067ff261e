// A fixed team of threads that runs one function on every member and waits for all: the caller is member 0, so a
// team of one starts no thread. Dispatching allocates nothing (a function pointer and a context), which keeps an
// optimizer step allocation-free with any number of threads. An exception thrown by a member is rethrown to the
// caller after every member has finished.
//
// run may be called from several threads at once: the calls are serialized (one dispatch owns the team from its
// start to its last member's return), so each caller's function runs whole on the team and no caller waits on
// another's members. A member must not call run on its own pool (it would wait for itself).
//
// The team itself (threads, locks, condition variables) lives in libgeomopt_optimizers (src/thread_pool.cpp), so the
// headers of <thread> and <mutex> stay out of every file that includes the optimizers.
#pragma once

#include <memory>

namespace geomopt::detail {

class ThreadPool {
 public:
  explicit ThreadPool(int size);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int size() const noexcept { return size_; }

  /// Calls f(member) for member = 0 .. size() - 1, member 0 on this thread, and returns when all have returned.
  template <class F>
  void run(F& f) {
    if (size_ == 1) {
      f(0);
      return;
    }
    dispatch([](void* ctx, int member) { (*static_cast<F*>(ctx))(member); }, &f);
  }

 private:
  struct Team;
  void dispatch(void (*task)(void*, int), void* context);

  int size_;
  std::unique_ptr<Team> team_;
};

}  // namespace geomopt::detail
