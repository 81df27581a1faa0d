// The org.varlink.certification sequence as data, for the certification service and client of
// tests/varlink: Start, Test01 … Test11, End, each call carrying the client id and what the call
// before it returned. The replies are the reference implementations' (the Go and Python services of
// github.com/varlink): the client checks the reference Go service's answers against them, the
// service gives them, and the reference Go client chains them. Header-only data: nothing is shared
// between threads.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <numbers>
#include <string>
#include <string_view>

namespace certification {

inline constexpr const char* kInterface = "org.varlink.certification";
inline constexpr const char* kClientIdError = "org.varlink.certification.ClientIdError";
inline constexpr const char* kCertificationError = "org.varlink.certification.CertificationError";

// The methods in the order a client calls them. Test10 is called with `more` and answers
// kMoreReplies times; Test11 is called `oneway`.
inline constexpr std::array<std::string_view, 13> kSequence = {"Start",  "Test01", "Test02", "Test03", "Test04",
                                                               "Test05", "Test06", "Test07", "Test08", "Test09",
                                                               "Test10", "Test11", "End"};
inline constexpr int kMoreReplies = 10;

inline std::string qualified(std::string_view method) { return std::string(kInterface) + "." + std::string(method); }

// The i-th reply of Test10, from 1.
inline std::string more_reply(int i) { return "Reply number " + std::to_string(i); }

inline nlohmann::json last_more_replies() {
  nlohmann::json a = nlohmann::json::array();
  for (int i = 1; i <= kMoreReplies; ++i) a.push_back(more_reply(i));
  return a;
}

// What the service answers to a method (Start's client id aside, which the service chooses; Test10's
// are more_reply(); Test11, oneway, gets none).
inline nlohmann::json reply_of(std::string_view method) {
  using nlohmann::json;
  const json basic = {{"bool", false}, {"int", 2}, {"float", std::numbers::pi}, {"string", "a lot of string"}};
  const json pair = {{"foo", "Foo"}, {"bar", "Bar"}};
  const json set = {{"one", json::object()}, {"two", json::object()}, {"three", json::object()}};
  if (method == "Test01") return {{"bool", true}};
  if (method == "Test02") return {{"int", 1}};
  if (method == "Test03") return {{"float", 1.0}};
  if (method == "Test04") return {{"string", "ping"}};
  if (method == "Test05") return basic;
  if (method == "Test06") return {{"struct", basic}};
  if (method == "Test07") return {{"map", pair}};
  if (method == "Test08") return {{"set", set}};
  if (method == "Test09")
    return {{"mytype",
             {{"object", {{"method", qualified("Test09")}, {"parameters", {{"map", pair}}}}},
              {"enum", "two"},
              {"struct", {{"first", 1}, {"second", "2"}}},
              {"array", {"one", "two", "three"}},
              {"dictionary", pair},
              {"stringset", set},
              {"nullable", nullptr},
              {"nullable_array_struct", nullptr},
              {"interface",
               {{"foo", {nullptr, {{"Foo", "foo"}, {"Bar", "bar"}}, nullptr, {{"one", "foo"}, {"two", "bar"}}}},
                {"anon", {{"foo", true}, {"bar", false}}}}}}}};
  if (method == "End") return {{"all_ok", true}};
  return json::object();
}

// The parameters of a call besides client_id: what the method before it returned.
inline nlohmann::json parameters_of(std::string_view method) {
  if (method == "Test11") return {{"last_more_replies", last_more_replies()}};
  if (method == "Start" || method == "Test01" || method == "End") return nlohmann::json::object();
  for (std::size_t i = 1; i < kSequence.size(); ++i)
    if (kSequence[i] == method) return reply_of(kSequence[i - 1]);
  return nlohmann::json::object();
}

// A value with its null object members removed, recursively: an optional field (`?type`) may be
// sent as null or left out (the Go library leaves it out, Python sends null), and both mean the same.
inline nlohmann::json without_nulls(const nlohmann::json& v) {
  if (v.is_array()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& e : v) a.push_back(without_nulls(e));
    return a;
  }
  if (!v.is_object()) return v;
  nlohmann::json o = nlohmann::json::object();
  for (auto it = v.begin(); it != v.end(); ++it)
    if (!it->is_null()) o[it.key()] = without_nulls(*it);
  return o;
}

}  // namespace certification
