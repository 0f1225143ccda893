// SPDX-License-Identifier: GPL-3.0-or-later
// SeriesSummary: what a chart keeps of one series, in memory that does not grow with the
// run. A fixed number of buckets summarise every point (min, max, mean; when they fill,
// neighbours merge and each bucket covers twice as many points), and the most recent
// points are kept raw. A chart asks for the points to draw at its width: the real points
// where there are few enough, else the min and max of each pixel column. Every point
// stays in the run store; zooming into the past reads them back from there.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ptw::ui {

class SeriesSummary {
 public:
  /// Example: SeriesSummary(2048, 4096)
  explicit SeriesSummary(std::size_t buckets = 2048, std::size_t rawTail = 4096);

  /// Appends a point; x must not decrease (steps).
  void add(double x, double y) { add({x, y, y, y, x, 1}); }
  /// Appends a group of `count` points over [x0, x] with these mean and extremes (Note [Step
  /// groups] in common/record.h): drawn as a column from yMin to yMax, counted as `count`.
  void addGroup(double x0, double x, double mean, double yMin, double yMax, std::size_t count) {
    add({x, mean, yMin, yMax, x0, count});
  }
  /// Drops every point with x > `x` (a restarted run replays from its checkpoint).
  void truncateAfter(double x);
  void clear();

  /// Points added, a group's counted as its points.
  std::size_t count() const { return m_count; }
  bool empty() const { return m_count == 0; }
  double xFirst() const { return m_xFirst; }
  double xLast() const { return m_xLast; }
  /// x of the oldest point still held raw.
  double rawFrom() const { return m_tail.empty() ? m_xLast : m_tail.front().x; }

  struct Column {
    double x;  ///< where to draw the mean
    double yMin, yMax;
    double xAtMin, xAtMax;
    double mean;
    std::size_t count;
  };
  /// The points in [x0, x1] at `columns` pixel columns: one Column per real point when
  /// there are at most 2 × columns of them raw, else one per non-empty pixel column.
  std::vector<Column> render(double x0, double x1, int columns) const;

  /// Bytes held, whatever the run length (for the chart benchmark).
  std::size_t memoryBytes() const;

 private:
  struct Point {
    double x, y;        ///< y: the mean of a group
    double yMin, yMax;  ///< y, but for a group
    double x0;          ///< x, but for a group: its first
    std::size_t count;  ///< 1, but for a group
  };
  void add(const Point& p);
  /// The newest points, oldest first, in one contiguous run: points past the capacity are
  /// dropped from the front by moving an index, and erased in one move once a quarter of the
  /// capacity has been dropped (a deque would allocate and free a chunk every 32 points, for
  /// each of a chart's series).
  class Tail {
   public:
    explicit Tail(std::size_t capacity) : m_capacity(capacity), m_slack(std::max<std::size_t>(capacity / 4, 1)) {
      m_points.reserve(capacity + m_slack + 1);
    }
    void push(Point p) {
      m_points.push_back(p);
      if (m_points.size() - m_head > m_capacity && ++m_head >= m_slack) {
        m_points.erase(m_points.begin(), m_points.begin() + static_cast<std::ptrdiff_t>(m_head));
        m_head = 0;
      }
    }
    void popBack() { m_points.pop_back(); }
    void clear() { m_points.clear(), m_head = 0; }
    bool empty() const { return m_points.size() == m_head; }
    std::size_t size() const { return m_points.size() - m_head; }
    const Point& front() const { return m_points[m_head]; }
    const Point& back() const { return m_points.back(); }
    std::vector<Point>::const_iterator begin() const { return m_points.begin() + static_cast<std::ptrdiff_t>(m_head); }
    std::vector<Point>::const_iterator end() const { return m_points.end(); }
    std::size_t memoryBytes() const { return m_points.capacity() * sizeof(Point); }

   private:
    std::size_t m_capacity, m_slack;
    std::vector<Point> m_points;
    std::size_t m_head = 0;  ///< the oldest point held
  };
  struct Bucket {
    double x0 = 0, x1 = 0, yMin = 0, yMax = 0, xAtMin = 0, xAtMax = 0, sum = 0;
    std::size_t count = 0;
    void add(const Point& p);
    void merge(const Bucket& b);
  };
  void compact();

  std::size_t m_capacity;
  std::size_t m_width = 1;  ///< points per full bucket
  std::vector<Bucket> m_buckets;
  Tail m_tail;
  std::size_t m_count = 0;
  double m_xFirst = 0, m_xLast = 0;
};

/// Exponential moving average with TensorBoard's bias correction, over rendered columns:
/// a column of n points with mean m counts as n points of value m (exact for real points).
std::vector<double> smoothedMeans(const std::vector<SeriesSummary::Column>& columns, double weight);

}  // namespace ptw::ui
