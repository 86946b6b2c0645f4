// carto/util/static_vector.hpp — a fixed-capacity vector usable in constant expressions.
//
// Design note: spec values (shapes, meshes, sharding specs) must be storable in constexpr variables
// so that static_assert can check them; std::vector cannot outlive a constant evaluation, so these
// value types hold a StaticVector. Capacity overflow is a carto::Error at run time and a compile
// error in a constant expression.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>

#include "carto/error.hpp"

namespace carto {

template <class T, std::size_t Capacity>
class StaticVector {
 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  constexpr StaticVector() = default;
  constexpr StaticVector(std::initializer_list<T> items) {
    for (const T& item : items) push_back(item);
  }

  constexpr void push_back(const T& item) {
    if (size_ == Capacity) {
      detail::fail("carto::StaticVector: capacity ", Capacity, " exceeded");
    }
    items_[size_++] = item;
  }
  constexpr void pop_back() {
    if (size_ == 0) detail::fail("carto::StaticVector: pop_back on an empty vector");
    --size_;
  }
  constexpr void clear() { size_ = 0; }
  constexpr void insert(std::size_t position, const T& item) {
    push_back(item);
    for (std::size_t i = size_ - 1; i > position; --i) items_[i] = items_[i - 1];
    items_[position] = item;
  }

  [[nodiscard]] constexpr std::size_t size() const { return size_; }
  [[nodiscard]] constexpr bool empty() const { return size_ == 0; }
  [[nodiscard]] static constexpr std::size_t capacity() { return Capacity; }

  constexpr T& operator[](std::size_t i) { return items_[i]; }
  constexpr const T& operator[](std::size_t i) const { return items_[i]; }
  constexpr T& back() { return items_[size_ - 1]; }
  constexpr const T& back() const { return items_[size_ - 1]; }

  constexpr iterator begin() { return items_.data(); }
  constexpr iterator end() { return items_.data() + size_; }
  constexpr const_iterator begin() const { return items_.data(); }
  constexpr const_iterator end() const { return items_.data() + size_; }

  friend constexpr bool operator==(const StaticVector& a, const StaticVector& b) {
    if (a.size_ != b.size_) return false;
    for (std::size_t i = 0; i < a.size_; ++i) {
      if (!(a.items_[i] == b.items_[i])) return false;
    }
    return true;
  }

 private:
  std::array<T, Capacity> items_{};
  std::size_t size_ = 0;
};

}  // namespace carto
