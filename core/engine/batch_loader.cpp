// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/batch_loader.h"

#include "common/error.h"

namespace ptw::engine {
namespace {
std::string messageOf(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}
}  // namespace

BatchLoader::BatchLoader(BatchLoaderOptions options, Prepare prepare)
    : m_prepare(std::move(prepare)), m_depth(options.depth > 0 ? options.depth : 2 * options.threads) {
  PTW_CHECK(options.threads >= 1, "run.loader_threads: a loader needs at least 1 thread, got ", options.threads);
  m_threads.reserve(static_cast<std::size_t>(options.threads));
  for (int i = 0; i < options.threads; ++i) m_threads.emplace_back([this] { work(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  m_filled.notify_all();
  for (auto& t : m_threads) t.join();
}

void BatchLoader::queue(std::int64_t epoch, std::shared_ptr<const Batches> batches, std::int64_t from) {
  PTW_CHECK(batches && from >= 0 && from <= static_cast<std::int64_t>(batches->size()), "data loader: epoch ", epoch,
            " queued from batch ", from, " of ", batches ? batches->size() : 0);
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    Segment s{epoch, std::move(batches), from, m_end};
    if (s.end() == s.begin) return;
    m_end = s.end();
    m_segments.push_back(std::move(s));
  }
  m_wake.notify_all();
}

const BatchLoader::Segment* BatchLoader::segmentAt(std::int64_t position) const {
  for (const auto& s : m_segments)
    if (position >= s.begin && position < s.end()) return &s;
  return nullptr;
}

bool BatchLoader::isNext(std::int64_t epoch, std::int64_t index) {
  std::lock_guard<std::mutex> lock(m_mutex);
  const Segment* s = segmentAt(m_taken);
  return s && s->epoch == epoch && s->from + (m_taken - s->begin) == index;
}

void BatchLoader::clear() {
  std::lock_guard<std::mutex> lock(m_mutex);
  ++m_generation;
  m_segments.clear();
  m_ready.clear();
  m_claimed = m_taken = m_end = 0;
}

LoadedBatch BatchLoader::take() {
  std::unique_lock<std::mutex> lock(m_mutex);
  PTW_CHECK(m_taken < m_end, "data loader: no batch queued");
  const std::int64_t position = m_taken;
  // Bounded: every claimed batch ends in a result or an error, and one is claimed while this waits.
  m_filled.wait(lock, [&] { return m_stop || m_ready.count(position) != 0; });
  PTW_CHECK(!m_stop, "data loader: stopped");
  auto node = m_ready.extract(position);
  Result& r = node.mapped();
  ++m_taken;
  while (!m_segments.empty() && m_segments.front().end() <= m_taken) m_segments.pop_front();
  lock.unlock();
  m_wake.notify_all();
  PTW_CHECK(r.error.empty(), "data loader: batch ", r.batch.index, " of epoch ", r.batch.epoch, ": ", r.error);
  return std::move(r.batch);
}

void BatchLoader::work() {
  std::unique_lock<std::mutex> lock(m_mutex);
  for (;;) {
    m_wake.wait(lock, [&] { return m_stop || (m_claimed < m_end && m_claimed < m_taken + m_depth); });
    if (m_stop) return;
    const std::int64_t position = m_claimed++;
    const Segment* s = segmentAt(position);
    const std::int64_t epoch = s->epoch, index = s->from + (position - s->begin);
    const std::shared_ptr<const Batches> batches = s->batches;  // the rows stay while this prepares them
    const std::uint64_t generation = m_generation;
    lock.unlock();
    Result r;
    try {
      r.batch = m_prepare(epoch, index, (*batches)[static_cast<std::size_t>(index)]);
    } catch (const std::exception& e) {
      r.error = messageOf(e);
    } catch (...) {
      r.error = "unknown exception";
    }
    r.batch.epoch = epoch;
    r.batch.index = index;
    lock.lock();
    if (generation != m_generation) continue;
    m_ready.emplace(position, std::move(r));
    m_filled.notify_all();
  }
}

}  // namespace ptw::engine
