#include "wait.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

namespace geomopt::distributed::detail {

namespace {

std::string seconds(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

std::string mpi_message(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace

void Link::ensure_healthy(const char* operation) const {
  if (fault && !fault->empty())
    throw Error(std::string(operation) + ": the communicator failed before (" + *fault +
                "); no message is exchanged on it again");
}

void Link::poison(const std::string& message) const noexcept {
  try {
    if (fault && fault->empty()) *fault = message;
  } catch (...) {  // an allocation failure leaves the fault as it was; the error itself is still thrown
  }
}

void Link::wait(MPI_Request* requests, int n, const Peer* peers, const WaitFor& what, MPI_Status* statuses) const {
  if (n <= 0) return;
  using Clock = std::chrono::steady_clock;
  int done = 0;
  int rc = MPI_Testall(n, requests, &done, statuses);
  if (rc == MPI_SUCCESS && done) return;
  const Clock::time_point start = Clock::now();
  // A timeout beyond a year waits as long as it takes (no overflow of the deadline).
  const Clock::time_point deadline = timeout > std::chrono::hours(24 * 365)
                                         ? Clock::time_point::max()
                                         : start + std::chrono::duration_cast<Clock::duration>(timeout);
  bool expired = false;
  while (rc == MPI_SUCCESS && !done) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      expired = true;
      break;
    }
    if (now - start >= kYield)
      std::this_thread::sleep_for(kSleep);
    else if (now - start >= kSpin)
      std::this_thread::yield();
    rc = MPI_Testall(n, requests, &done, statuses);
  }
  if (rc == MPI_SUCCESS && done) return;

  // Who is missing: the pending receives' ranks, else the pending sends' (a peer that does not take its message).
  std::vector<int> from, to;
  std::int64_t leaf = what.leaf;
  bool leaf_known = false;
  for (int i = 0; peers != nullptr && i < n; ++i) {
    int complete = 0;
    if (MPI_Request_get_status(requests[i], &complete, MPI_STATUS_IGNORE) != MPI_SUCCESS) complete = 0;
    if (complete) continue;
    (peers[i].receive ? from : to).push_back(peers[i].rank);
    if (!leaf_known && (peers[i].receive || from.empty())) leaf = peers[i].leaf;
    leaf_known = leaf_known || peers[i].receive;
  }
  for (std::vector<int>* list : {&from, &to}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  auto names = [](const std::vector<int>& ranks) {
    std::string text = ranks.size() == 1 ? "rank" : "ranks";
    for (std::size_t i = 0; i < ranks.size(); ++i)
      text += (i == 0 ? " " : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
    return text;
  };
  const std::string path = what.paths != nullptr && leaf >= 0 && static_cast<std::size_t>(leaf) < what.paths->size()
                               ? (*what.paths)[static_cast<std::size_t>(leaf)]
                               : std::string();
  std::string waiting;
  if (!from.empty())
    waiting = "the messages of " + names(from) + " did not arrive";
  else if (!to.empty())
    waiting = names(to) + " did not receive this rank's messages";
  else
    waiting = "not every rank took part (a collective does not tell which)";
  const std::string context = std::string(what.part) + (what.index >= 0 ? " " + std::to_string(what.index) : "") +
                              (path.empty() ? "" : ", from " + path) + ", on rank " + std::to_string(rank);
  const std::vector<int>& missing = from.empty() ? to : from;
  if (expired) {
    const std::string message = std::string(what.operation) + ": " + waiting + " within the timeout of " +
                                seconds(timeout) + " (" + context + ")";
    poison(message);
    throw TimeoutError(message, missing, path);
  }
  const std::string message = std::string(what.operation) + ": MPI failed on rank " + std::to_string(rank) +
                              " while waiting for " + (missing.empty() ? std::string("every rank") : names(missing)) +
                              " (" + context + "): " + mpi_message(rc);
  poison(message);
  throw Error(message);
}

}  // namespace geomopt::distributed::detail
