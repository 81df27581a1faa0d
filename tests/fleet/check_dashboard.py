#!/usr/bin/env python3
"""Checks contrib/grafana/haltpolld.json against the fields of Grafana's dashboard JSON model that it
uses (Grafana is not packaged for Debian 12, so its own validator cannot run here), and that every
recording rule a query names is defined in the rules file.

With --prometheus URL it also runs every query as Grafana would (template variables substituted)
against that Prometheus: each must be accepted, and each panel query must return data.

Usage: check_dashboard.py DASHBOARD RULES [--prometheus URL --var NAME=VALUE ... --window 5m]
"""
import argparse
import json
import re
import sys
import urllib.parse
import urllib.request

PANEL_TYPES = {"row", "timeseries", "table", "stat", "bargauge", "gauge", "text"}
BUILTIN_VARS = {"__rate_interval", "__interval", "__range"}
errors = []


def err(where, msg):
    errors.append("%s: %s" % (where, msg))


def need(obj, key, typ, where):
    if not isinstance(obj, dict) or key not in obj:
        err(where, "missing %r" % key)
        return None
    v = obj[key]
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        err(where, "%r is %s, want %s" % (key, type(v).__name__, typ.__name__ if isinstance(typ, type) else typ))
        return None
    return v


def check_datasource(ds, where, var_names):
    if not isinstance(ds, dict):
        return err(where, "datasource must be an object {type, uid}")
    if ds.get("type") != "prometheus":
        err(where, "datasource type %r, want prometheus" % ds.get("type"))
    uid = need(ds, "uid", str, where)
    if uid and uid.startswith("${") and uid[2:-1] not in var_names:
        err(where, "datasource uid %s names no template variable" % uid)


def queries(dash):
    """(where, expr, must_have_data) for every query of the dashboard."""
    for p in dash.get("panels", []):
        for t in p.get("targets", []) or []:
            yield "panel %r target %s" % (p.get("title"), t.get("refId")), t.get("expr", ""), True
    for a in dash.get("annotations", {}).get("list", []):
        # An annotation marks events: no event in the window is a valid answer.
        yield "annotation %r" % a.get("name"), a.get("expr", ""), False


def check_structure(dash, recorded):
    top = "dashboard"
    for key, typ in (("title", str), ("uid", str), ("schemaVersion", int), ("version", int), ("panels", list),
                     ("templating", dict), ("annotations", dict), ("time", dict)):
        need(dash, key, typ, top)
    if isinstance(dash.get("schemaVersion"), int) and dash["schemaVersion"] < 30:
        err(top, "schemaVersion %d predates the timeseries panel (30)" % dash["schemaVersion"])
    uid = dash.get("uid", "")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid or ""):
        err(top, "uid %r: at most 40 of [A-Za-z0-9_-]" % uid)
    t = dash.get("time", {})
    need(t, "from", str, "time")
    need(t, "to", str, "time")

    var_names = set()
    for i, v in enumerate(dash.get("templating", {}).get("list", [])):
        where = "templating.list[%d]" % i
        name = need(v, "name", str, where)
        vtype = need(v, "type", str, where)
        if name:
            var_names.add(name)
        if vtype == "query":
            check_datasource(v.get("datasource"), where, var_names)
            q = v.get("query")
            if not (isinstance(q, str) or (isinstance(q, dict) and isinstance(q.get("query"), str))):
                err(where, "query must be a string or {query, refId}")
        elif vtype == "datasource":
            if v.get("query") != "prometheus":
                err(where, "datasource variable must select prometheus")
        elif vtype is not None:
            err(where, "variable type %r not used by this checker" % vtype)

    ids = set()
    for i, p in enumerate(dash.get("panels", [])):
        where = "panels[%d] %r" % (i, p.get("title"))
        pid = need(p, "id", int, where)
        if pid is not None:
            if pid in ids:
                err(where, "duplicate id %d" % pid)
            ids.add(pid)
        ptype = need(p, "type", str, where)
        if ptype and ptype not in PANEL_TYPES:
            err(where, "panel type %r" % ptype)
        need(p, "title", str, where)
        g = need(p, "gridPos", dict, where)
        if g:
            vals = [need(g, k, int, where + ".gridPos") for k in ("x", "y", "w", "h")]
            if None not in vals:
                x, y, w, h = vals
                if x < 0 or w < 1 or x + w > 24 or h < 1 or y < 0:
                    err(where, "gridPos %s outside the 24-column grid" % g)
        if ptype == "row":
            continue
        need(p, "description", str, where)  # docs/operations.md repeats them; the panel shows it too
        check_datasource(p.get("datasource"), where, var_names)
        targets = need(p, "targets", list, where) or []
        if not targets:
            err(where, "no targets")
        refs = set()
        for t in targets:
            ref = need(t, "refId", str, where)
            if ref in refs:
                err(where, "duplicate refId %s" % ref)
            refs.add(ref)
            need(t, "expr", str, where)
            check_datasource(t.get("datasource"), where + " target " + str(ref), var_names)

    for i, a in enumerate(dash.get("annotations", {}).get("list", [])):
        where = "annotations.list[%d]" % i
        need(a, "name", str, where)
        need(a, "expr", str, where)
        need(a, "enable", bool, where)
        check_datasource(a.get("datasource"), where, var_names)

    for where, expr, _ in queries(dash):
        for v in re.findall(r"\$\{?(\w+)", expr):
            if v not in var_names and v not in BUILTIN_VARS:
                err(where, "unknown variable $%s" % v)
        for name in re.findall(r"\b([a-z_]+:[a-z_0-9]+:[a-z_0-9]+)\b", expr):
            if name not in recorded:
                err(where, "recording rule %s is not in the rules file" % name)


def check_live(dash, url, variables, window):
    for where, expr, must_have_data in queries(dash):
        q = expr.replace("$__rate_interval", window).replace("$__interval", window)
        for k, v in variables.items():
            q = q.replace("${%s}" % k, v).replace("$" + k, v)
        try:
            with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": q}), timeout=10) as r:
                body = json.load(r)
        except Exception as e:  # an HTTP 400 is how Prometheus refuses a query
            err(where, "query %r: %s" % (q, e))
            continue
        n = len(body.get("data", {}).get("result", []))
        if body.get("status") != "success":
            err(where, "query %r: %s" % (q, body))
        elif must_have_data and n == 0:
            err(where, "query %r returned no data" % q)
        else:
            print("ok %-60s %d series" % (where[:60], n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dashboard")
    ap.add_argument("rules")
    ap.add_argument("--prometheus")
    ap.add_argument("--var", action="append", default=[])
    ap.add_argument("--window", default="5m")
    a = ap.parse_args()
    try:
        with open(a.dashboard) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("%s: not valid JSON: %s" % (a.dashboard, e))
    with open(a.rules) as f:
        recorded = set(re.findall(r"^\s*- record:\s*(\S+)\s*$", f.read(), re.M))
    if not recorded:
        sys.exit("%s: no recording rules found" % a.rules)
    check_structure(dash, recorded)
    if a.prometheus and not errors:
        check_live(dash, a.prometheus.rstrip("/"), dict(v.split("=", 1) for v in a.var), a.window)
    for e in errors:
        print("FAIL " + e, file=sys.stderr)
    if not errors:
        print("dashboard %s: %d panels, structure and queries OK" % (a.dashboard, len(dash["panels"])))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
