#include "varlink/varlink.hpp"

#include <cstring>
#include <set>

namespace haltpolld::varlink {

using nlohmann::json;

bool FrameDecoder::feed(std::string_view bytes) {
  if (overflowed_) return false;
  // Compact lazily so that a pipelined stream does not grow the buffer without bound.
  if (start_ > 0 && start_ >= buf_.size() / 2) {
    buf_.erase(0, start_);
    scan_ -= start_;
    start_ = 0;
  }
  buf_.append(bytes.data(), bytes.size());
  // Check the unterminated tail: without a NUL in the next max_+1 bytes the message is too long.
  std::size_t nul = buf_.find('\0', scan_);
  std::size_t msg_start = start_;
  while (nul != std::string::npos) {
    if (nul - msg_start > max_) {
      overflowed_ = true;
      return false;
    }
    msg_start = nul + 1;
    nul = buf_.find('\0', msg_start);
  }
  if (buf_.size() - msg_start > max_) {
    overflowed_ = true;
    return false;
  }
  return true;
}

std::optional<std::string> FrameDecoder::next() {
  if (overflowed_) return std::nullopt;
  std::size_t nul = buf_.find('\0', std::max(scan_, start_));
  if (nul == std::string::npos) {
    scan_ = buf_.size();
    return std::nullopt;
  }
  std::string msg = buf_.substr(start_, nul - start_);
  start_ = nul + 1;
  scan_ = start_;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = scan_ = 0;
  }
  return msg;
}

namespace {

bool valid_identifier_char(char c, bool first) {
  if (c >= 'A' && c <= 'Z') return true;
  if (c >= 'a' && c <= 'z') return true;
  if (first) return false;
  return (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Interface names are reverse-domain (at least one dot), method and error names start with a capital.
bool valid_qualified_name(std::string_view s) {
  auto [iface, method] = split_method(s);
  if (iface.empty() || method.empty() || iface.size() > 255 || method.size() > 255) return false;
  if (!(method.front() >= 'A' && method.front() <= 'Z')) return false;
  for (char c : method)
    if (!valid_identifier_char(c, false) || c == '-') return false;
  bool label_start = true, dot = false;
  for (char c : iface) {
    if (c == '.') {
      if (label_start) return false;
      label_start = true;
      dot = true;
      continue;
    }
    if (!valid_identifier_char(c, label_start)) return false;
    label_start = false;
  }
  return dot && !label_start;
}

}  // namespace

std::pair<std::string_view, std::string_view> split_method(std::string_view qualified) {
  auto dot = qualified.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return {{}, {}};
  return {qualified.substr(0, dot), qualified.substr(dot + 1)};
}

namespace {

// One message as a JSON object; `what` names it ("call", "reply") in `why`.
std::optional<json> parse_object(std::string_view text, const char* what, std::string& why) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    why = "not valid JSON";
    return std::nullopt;
  }
  if (!j.is_object()) {
    why = std::string("a ") + what + " must be a JSON object";
    return std::nullopt;
  }
  return j;
}

// A boolean field: null is absent (false). False with `why` when it is anything else.
bool read_flag(const json& value, const std::string& key, bool& out, std::string& why) {
  if (value.is_null()) return true;
  if (!value.is_boolean()) {
    why = "\"" + key + "\" must be a boolean";
    return false;
  }
  out = value.get<bool>();
  return true;
}

}  // namespace

std::optional<Call> parse_call(std::string_view text, std::string& why) {
  auto j = parse_object(text, "call", why);
  if (!j) return std::nullopt;
  Call c;
  for (auto it = j->begin(); it != j->end(); ++it) {
    const std::string& k = it.key();
    if (k == "method") {
      if (!it->is_string()) {
        why = "\"method\" must be a string";
        return std::nullopt;
      }
      c.method = it->get<std::string>();
    } else if (k == "parameters") {
      // null is what the reference implementations send for "no parameters" (Go's GetInfo).
      if (it->is_null()) continue;
      if (!it->is_object()) {
        c.invalid_parameter = "parameters";
        continue;
      }
      c.parameters = std::move(*it);
    } else if (k == "more" || k == "oneway" || k == "upgrade") {
      bool upgrade = false;
      if (!read_flag(*it, k, k == "more" ? c.more : k == "oneway" ? c.oneway : upgrade, why)) return std::nullopt;
      if (upgrade) {
        why = "\"upgrade\" is not supported";
        return std::nullopt;
      }
    } else {
      why = "unknown field \"" + k + "\"";
      return std::nullopt;
    }
  }
  if (c.method.empty()) {
    why = "missing \"method\"";
    return std::nullopt;
  }
  if (!valid_qualified_name(c.method)) {
    why = "\"method\" is not a qualified varlink method name";
    return std::nullopt;
  }
  if (c.more && c.oneway) {
    why = "\"more\" and \"oneway\" exclude each other";
    return std::nullopt;
  }
  return c;
}

std::optional<Reply> parse_reply(std::string_view text, std::string& why) {
  auto j = parse_object(text, "reply", why);
  if (!j) return std::nullopt;
  Reply r;
  for (auto it = j->begin(); it != j->end(); ++it) {
    const std::string& k = it.key();
    if (k == "parameters") {
      if (it->is_null()) continue;
      if (!it->is_object()) {
        why = "\"parameters\" must be an object";
        return std::nullopt;
      }
      r.parameters = std::move(*it);
    } else if (k == "error") {
      if (it->is_null()) continue;
      if (!it->is_string() || !valid_qualified_name(it->get<std::string>())) {
        why = "\"error\" is not a qualified varlink error name";
        return std::nullopt;
      }
      r.error = it->get<std::string>();
    } else if (k == "continues") {
      if (!read_flag(*it, k, r.continues, why)) return std::nullopt;
    } else {
      why = "unknown field \"" + k + "\"";
      return std::nullopt;
    }
  }
  if (r.is_error() && r.continues) {
    why = "an error reply does not continue";
    return std::nullopt;
  }
  return r;
}

std::string encode_reply(const Reply& r) {
  json j = json::object();
  if (r.is_error()) j["error"] = r.error;
  j["parameters"] = r.parameters.is_object() ? r.parameters : json::object();
  if (r.continues && !r.is_error()) j["continues"] = true;
  // Replace invalid UTF-8 rather than throw: a reply must always be encodable.
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  s.push_back('\0');
  return s;
}

std::string encode_call(const Call& c) {
  json j = {{"method", c.method}};
  if (!c.parameters.empty()) j["parameters"] = c.parameters;
  if (c.more) j["more"] = true;
  if (c.oneway) j["oneway"] = true;
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  s.push_back('\0');
  return s;
}

Reply error_reply(std::string error, json parameters) {
  Reply r;
  r.error = std::move(error);
  r.parameters = std::move(parameters);
  return r;
}

Reply invalid_parameter(std::string parameter, std::string reason) {
  json p = {{"parameter", std::move(parameter)}};
  if (!reason.empty()) p["reason"] = std::move(reason);
  return error_reply(errors::invalid_parameter, std::move(p));
}

namespace {
constexpr const char* kServiceInterface = "org.varlink.service";
constexpr const char* kServiceIdl = R"(# The Varlink Service Interface is provided by every varlink service.
interface org.varlink.service

# Get a list of all the interfaces a service provides and information about the implementation.
method GetInfo() -> (vendor: string, product: string, version: string, url: string, interfaces: []string)

# Get the description of an interface that is implemented by this service.
method GetInterfaceDescription(interface: string) -> (description: string)

error InterfaceNotFound (interface: string)
error MethodNotFound (method: string)
error MethodNotImplemented (method: string)
error InvalidParameter (parameter: string)
error PermissionDenied ()
error ExpectedMore ()
)";
}  // namespace

Registry::Registry(ServiceInfo info) : info_(std::move(info)) {
  add({std::string(kServiceInterface) + ".GetInfo", "", false, false, [this](const Call&, const Peer&) {
         Reply r;
         r.parameters = {{"vendor", info_.vendor},
                         {"product", info_.product},
                         {"version", info_.version},
                         {"url", info_.url},
                         {"interfaces", interfaces()}};
         return r;
       }});
  add({std::string(kServiceInterface) + ".GetInterfaceDescription", "", false, false,
       [this](const Call& call, const Peer&) {
         auto it = call.parameters.find("interface");
         if (it == call.parameters.end() || !it->is_string()) return invalid_parameter("interface");
         auto d = interface_description(it->get<std::string>());
         if (!d) return error_reply(errors::interface_not_found, {{"interface", *it}});
         Reply r;
         r.parameters = {{"description", *d}};
         return r;
       }});
}

void Registry::add(Method m) {
  std::string name = m.name;
  methods_[name] = std::move(m);
}

void Registry::describe_interface(const std::string& interface, std::string idl_preamble) {
  preambles_[interface] = std::move(idl_preamble);
}

const Method* Registry::find(std::string_view qualified_name) const {
  auto it = methods_.find(qualified_name);
  return it == methods_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::interfaces() const {
  std::set<std::string> s;
  for (const auto& [name, m] : methods_) s.insert(std::string(split_method(name).first));
  return {s.begin(), s.end()};
}

std::vector<std::string> Registry::method_names() const {
  std::vector<std::string> v;
  for (const auto& [name, m] : methods_) v.push_back(name);
  return v;
}

std::optional<std::string> Registry::interface_description(const std::string& interface) const {
  if (interface == kServiceInterface) return std::string(kServiceIdl);
  bool any = false;
  std::string idl;
  auto pre = preambles_.find(interface);
  if (pre != preambles_.end()) idl = pre->second;
  else idl = "interface " + interface + "\n";
  for (const auto& [name, m] : methods_) {
    if (split_method(name).first != interface) continue;
    any = true;
    if (!m.signature.empty()) idl += "\n" + m.signature + "\n";
  }
  if (!any) return std::nullopt;
  return idl;
}

Reply Registry::dispatch(const Call& call, const Peer& peer) const {
  const Method* m = find(call.method);
  if (m && !call.invalid_parameter.empty()) return invalid_parameter(call.invalid_parameter, "must be an object");
  if (!m) {
    auto iface = std::string(split_method(call.method).first);
    bool known = false;
    for (const auto& i : interfaces()) known |= i == iface;
    if (!known) return error_reply(errors::interface_not_found, {{"interface", iface}});
    return error_reply(errors::method_not_found, {{"method", call.method}});
  }
  if (m->admin_only && !peer.admin) return error_reply(errors::permission_denied);
  if (m->streaming && !call.more) return error_reply(errors::expected_more);
  if (!m->handler) return error_reply(errors::method_not_implemented, {{"method", call.method}});
  try {
    Reply r = m->handler(call, peer);
    if (!call.more) r.continues = false;
    return r;
  } catch (const std::exception& e) {
    return error_reply("io.haltpolld.InternalError", {{"reason", e.what()}});
  }
}

}  // namespace haltpolld::varlink
