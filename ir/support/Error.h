// Errors as values. Every user-facing failure travels as an Error carrying the exit code the
// CLI returns and a message that says what is wrong, where, and what to do about it.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace precast {

// Exit codes documented in README.md.
enum class ExitCode : int {
  kSuccess = 0,
  kFailure = 1,       // training aborted (NaN/Inf loss) or an I/O failure at run time
  kUsage = 2,         // bad command line, config, IR text or data file
  kOutOfMemory = 3,   // the step does not fit the target device's memory
  kIncompatible = 4,  // artifact damaged, foreign or built for another machine/config
  kInternal = 70,     // a bug in Precast (EX_SOFTWARE)
};

class Error {
 public:
  Error(ExitCode code, std::string message) : code_(code), message_(std::move(message)) {}

  ExitCode code() const { return code_; }
  int exit_code() const { return static_cast<int>(code_); }
  const std::string& message() const { return message_; }

  // Prefixes context, e.g. the file being read: "configs/x.yml: <message>".
  Error with_context(const std::string& context) const {
    return Error(code_, context + ": " + message_);
  }

 private:
  ExitCode code_;
  std::string message_;
};

inline Error usage_error(std::string message) {
  return Error(ExitCode::kUsage, std::move(message));
}
inline Error internal_error(std::string message) {
  return Error(ExitCode::kInternal, std::move(message));
}

// Expected<T>: a value or an Error (std::expected is C++23; g++ 12 lacks it).
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}
  Expected(Error error) : state_(std::move(error)) {}

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<T>(state_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(state_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(state_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<Error>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

// Status: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}
  static Status success() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(!ok());
    return *error_;
  }

 private:
  std::optional<Error> error_;
};

}  // namespace precast

// Propagates an error from an expression yielding Status or Expected<T>.
#define PRECAST_RETURN_IF_ERROR(expr)                          \
  do {                                                         \
    auto precast_status_ = (expr);                             \
    if (!precast_status_.ok()) return precast_status_.error(); \
  } while (0)

#define PRECAST_CONCAT_INNER_(a, b) a##b
#define PRECAST_CONCAT_(a, b) PRECAST_CONCAT_INNER_(a, b)
// Declares `lhs` from an Expected<T> expression, or returns its error.
#define PRECAST_ASSIGN_OR_RETURN(lhs, expr)                      \
  auto PRECAST_CONCAT_(precast_expected_, __LINE__) = (expr);    \
  if (!PRECAST_CONCAT_(precast_expected_, __LINE__).ok())        \
    return PRECAST_CONCAT_(precast_expected_, __LINE__).error(); \
  lhs = std::move(PRECAST_CONCAT_(precast_expected_, __LINE__)).value()
