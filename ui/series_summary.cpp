// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/series_summary.h"

#include <algorithm>
#include <cmath>

namespace ptw::ui {

void SeriesSummary::Bucket::add(const Point& p) {
  if (count == 0) {
    x0 = p.x0;
    yMin = p.yMin, yMax = p.yMax;
    xAtMin = xAtMax = p.x;
  } else {
    if (p.yMin < yMin) {
      yMin = p.yMin;
      xAtMin = p.x;
    }
    if (p.yMax > yMax) {
      yMax = p.yMax;
      xAtMax = p.x;
    }
  }
  x1 = p.x;
  sum += p.y * static_cast<double>(p.count);
  count += p.count;
}

void SeriesSummary::Bucket::merge(const Bucket& b) {
  if (b.count == 0) return;
  if (count == 0) {
    *this = b;
    return;
  }
  if (b.yMin < yMin) {
    yMin = b.yMin;
    xAtMin = b.xAtMin;
  }
  if (b.yMax > yMax) {
    yMax = b.yMax;
    xAtMax = b.xAtMax;
  }
  x1 = b.x1;
  sum += b.sum;
  count += b.count;
}

SeriesSummary::SeriesSummary(std::size_t buckets, std::size_t rawTail)
    : m_capacity(std::max<std::size_t>(buckets, 8) & ~std::size_t(1)), m_tail(rawTail) {
  m_buckets.reserve(m_capacity + 1);
}

void SeriesSummary::clear() {
  m_buckets.clear();
  m_tail.clear();
  m_width = 1;
  m_count = 0;
}

void SeriesSummary::add(const Point& p) {
  // A diverged loss is not drawn; the store keeps it. (A group's extremes are taken as given.)
  if (!std::isfinite(p.y) || p.count == 0) return;
  if (m_count == 0) m_xFirst = p.x0;
  m_xLast = p.x;
  m_count += p.count;
  if (m_buckets.empty() || m_buckets.back().count >= m_width) {
    if (m_buckets.size() == m_capacity) compact();
    m_buckets.emplace_back();
  }
  m_buckets.back().add(p);
  m_tail.push(p);
}

// Halves the bucket count: every pair becomes one bucket twice as wide.
void SeriesSummary::compact() {
  std::size_t out = 0;
  for (std::size_t i = 0; i + 1 < m_buckets.size(); i += 2) {
    Bucket b = m_buckets[i];
    b.merge(m_buckets[i + 1]);
    m_buckets[out++] = b;
  }
  if (m_buckets.size() % 2) m_buckets[out++] = m_buckets.back();
  m_buckets.resize(out);
  m_width *= 2;
}

void SeriesSummary::truncateAfter(double x) {
  while (!m_tail.empty() && m_tail.back().x > x) m_tail.popBack();
  while (!m_buckets.empty() && m_buckets.back().x0 > x) m_buckets.pop_back();
  if (!m_buckets.empty() && m_buckets.back().x1 > x) {
    // A bucket straddling x: rebuild it from raw points when they are held, else keep its
    // summary (display only; the store has the truth).
    Bucket& b = m_buckets.back();
    if (!m_tail.empty() && m_tail.front().x <= b.x0) {
      Bucket rebuilt;
      for (const auto& p : m_tail)
        if (p.x >= b.x0 && p.x <= x) rebuilt.add(p);
      b = rebuilt;
      if (b.count == 0) m_buckets.pop_back();
    } else {
      b.x1 = x;
    }
  }
  m_count = 0;
  for (const auto& b : m_buckets) m_count += b.count;
  if (m_count == 0)
    clear();
  else
    m_xLast = std::min(m_xLast, x);
}

std::vector<SeriesSummary::Column> SeriesSummary::render(double x0, double x1, int columns) const {
  std::vector<Column> out;
  if (m_count == 0 || x1 < x0 || columns <= 0) return out;
  // Real points when the raw tail covers the range and they are few enough.
  if (!m_tail.empty() && m_tail.front().x <= x0) {
    auto lo = std::lower_bound(m_tail.begin(), m_tail.end(), x0, [](const Point& p, double v) { return p.x < v; });
    auto hi = std::upper_bound(m_tail.begin(), m_tail.end(), x1, [](double v, const Point& p) { return v < p.x; });
    if (hi - lo <= 2 * columns) {
      // One point either side, so lines run to the edges.
      if (lo != m_tail.begin()) --lo;
      if (hi != m_tail.end()) ++hi;
      for (auto it = lo; it != hi; ++it) out.push_back({it->x, it->yMin, it->yMax, it->x, it->x, it->y, it->count});
      return out;
    }
  }
  const double dx = (x1 - x0) / columns;
  std::vector<Bucket> cols(static_cast<std::size_t>(columns));
  auto column = [&](double x) {
    return static_cast<std::size_t>(std::clamp(dx > 0 ? (x - x0) / dx : 0.0, 0.0, columns - 1.0));
  };
  // Buckets cover everything; where the raw tail starts, its points are finer.
  const double rawStart = m_tail.empty() ? m_xLast + 1 : m_tail.front().x;
  auto first =
      std::lower_bound(m_buckets.begin(), m_buckets.end(), x0, [](const Bucket& b, double v) { return b.x1 < v; });
  for (auto it = first; it != m_buckets.end() && it->x0 <= x1; ++it) {
    if (it->x0 >= rawStart) break;
    cols[column(0.5 * (it->x0 + it->x1))].merge(*it);
  }
  auto lo = std::lower_bound(m_tail.begin(), m_tail.end(), std::max(x0, rawStart),
                             [](const Point& p, double v) { return p.x < v; });
  for (auto it = lo; it != m_tail.end() && it->x <= x1; ++it) {
    Bucket one;
    one.add(*it);
    cols[column(it->x)].merge(one);
  }
  for (const auto& c : cols) {
    if (c.count == 0) continue;
    out.push_back(
        {0.5 * (c.x0 + c.x1), c.yMin, c.yMax, c.xAtMin, c.xAtMax, c.sum / static_cast<double>(c.count), c.count});
  }
  return out;
}

std::size_t SeriesSummary::memoryBytes() const {
  return sizeof(*this) + m_buckets.capacity() * sizeof(Bucket) + m_tail.memoryBytes();
}

std::vector<double> smoothedMeans(const std::vector<SeriesSummary::Column>& columns, double weight) {
  std::vector<double> out;
  out.reserve(columns.size());
  double ema = 0, debias = 1;  // debias = weight^n, so the first points are not pulled to 0
  for (const auto& c : columns) {
    const double w = std::pow(weight, static_cast<double>(c.count));
    ema = ema * w + (1 - w) * c.mean;
    debias *= w;
    out.push_back(debias < 1 ? ema / (1 - debias) : c.mean);
  }
  return out;
}

}  // namespace ptw::ui
