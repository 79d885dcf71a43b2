// queueing dashboard: renders the page's JSON (/api/<page>), polls once a second. Read-only, no libraries.
"use strict";
(function () {
  const page = document.body.dataset.page;
  const replay = document.body.dataset.mode === "replay";
  const main = document.getElementById("main");
  const detail = document.getElementById("detail");
  const status = document.getElementById("status");
  const state = { version: null, t: null, data: null, colorBy: "workload", filter: "", layoutId: null, cards: null };
  const POLL_MS = 1000;

  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const fmt = (v) => (v == null ? "–" : v);
  // the server gives every workload and queue a colour index, kept while it runs: index i is the hue
  // i x 137.5° (the golden angle: the first colours are far apart), lightness varies per turn
  const colour = (i) => `hsl(${(i * 137.508) % 360},${62 + (Math.floor(i / 3) % 2) * 12}%,${46 + (Math.floor(i / 7) % 3) * 7}%)`;
  const when = (t) => (replay ? `${Math.round(t * 1000) / 1000} s` : new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19));

  function query(extra) {
    const p = new URLSearchParams(extra || {});
    if (replay && state.t != null) p.set("t", state.t);
    return p.toString();
  }

  async function poll() {
    try {
      const q = query(state.version != null ? { since: state.version } : {});
      const r = await fetch(`/api/${page}?${q}`, { cache: "no-store" });
      if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
      const body = await r.json();
      if (!body.unchanged) {
        state.version = body.version;
        state.data = body.data;
        const t0 = performance.now();
        render(body.data);
        document.body.dataset.version = body.version;
        document.body.dataset.renderMs = Math.round(performance.now() - t0);
        if (!document.body.dataset.firstRender) {
          // ms since navigation start: the page's data is in the DOM; then painted (bench/dashboard_render.py)
          document.body.dataset.firstRender = Math.round(performance.now());
          requestAnimationFrame(() => setTimeout(() => { document.body.dataset.firstPaint = Math.round(performance.now()); }, 0));
        }
      }
      status.textContent = replay ? `replay · t = ${state.t} s` : `live · ${new Date().toLocaleTimeString()}`;
      status.classList.remove("error");
    } catch (e) {
      status.textContent = `error: ${e.message}`;
      status.classList.add("error");
    }
  }

  function loop() {
    poll().finally(() => { if (!replay) setTimeout(loop, POLL_MS); });
  }

  function render(d) {
    let note = document.getElementById("note");
    if (d.note && !note) { note = document.createElement("p"); note.id = "note"; note.className = "note"; main.before(note); }
    if (note) { note.textContent = d.note || ""; note.hidden = !d.note; }
    if (page === "queues") renderQueues(d);
    else if (page === "workloads") renderWorkloads(d);
    else if (page === "devices") renderDevices(d);
    else if (page === "history") renderHistory(d);
  }

  // ------------------------------------------------------------------ Queues
  function renderQueues(d) {
    const children = {};
    const cqsOf = {};
    const known = new Set(d.cohorts.map((c) => c.name));
    for (const c of d.cohorts) {
      const p = c.parent && known.has(c.parent) ? c.parent : "";  // an unknown parent: shown as a root
      (children[p] = children[p] || []).push(c);
    }
    for (const q of d.clusterQueues) (cqsOf[q.cohort || ""] = cqsOf[q.cohort || ""] || []).push(q);
    const lqsOf = {};
    for (const l of d.localQueues) (lqsOf[l.clusterQueue] = lqsOf[l.clusterQueue] || []).push(l);
    const cq = (q) => {
      const share = q.weightedShare == null ? "–" : (typeof q.weightedShare === "number" ? q.weightedShare.toFixed(3) : q.weightedShare);
      const stop = q.stopPolicy !== "None" ? `<span class="badge stop">stopped: ${esc(q.stopPolicy)}</span>` : "";
      const inactive = q.inactive ? `<span class="badge warn" title="${esc(q.inactive)}">inactive</span>` : "";
      const rows = q.resources.map((r) => `<tr><td>${esc(r.flavor)}</td><td>${esc(r.resource)}</td>
        <td class="num">${esc(fmt(r.nominal))}</td><td class="num">${esc(r.usage)}</td>
        <td><span class="bar"><span style="width:${Math.min(100, 100 * r.used)}%" class="${r.used > 1 ? "over" : ""}"></span></span></td>
        <td class="num">${esc(r.borrowed)}</td><td class="num">${esc(r.lent)}</td>
        <td class="num">${esc(fmt(r.borrowingLimit))}</td><td class="num">${esc(fmt(r.lendingLimit))}</td></tr>`).join("");
      const lqs = (lqsOf[q.name] || []).map((l) => `<li data-lq="${esc(l.key)}">LocalQueue <b>${esc(l.key)}</b> · ${l.pending} pending · ${l.admitted} admitted${l.stopPolicy !== "None" ? ` <span class="badge stop">stopped: ${esc(l.stopPolicy)}</span>` : ""}</li>`).join("");
      return `<div class="cq" data-cq="${esc(q.name)}"><h3><span class="swatch" style="background:${colour(q.colour)}"></span>ClusterQueue ${esc(q.name)} ${stop}${inactive}</h3>
        <p class="meta">weight ${q.weight} · weighted share <b data-share>${share}</b> · <b data-pending>${q.pending}</b> pending · <b data-admitted>${q.admitted}</b> admitted</p>
        <table class="quota"><thead><tr><th>flavor</th><th>resource</th><th>nominal</th><th>usage</th><th></th><th>borrowed</th><th>lent</th><th>borrowing limit</th><th>lending limit</th></tr></thead><tbody>${rows}</tbody></table>
        <ul class="lqs">${lqs}</ul></div>`;
    };
    const cohort = (c) => `<div class="cohort" data-cohort="${esc(c.name)}"><h2>Cohort ${esc(c.name)} <span class="meta">weight ${c.weight}</span></h2>
      ${(children[c.name] || []).map(cohort).join("")}${(cqsOf[c.name] || []).map(cq).join("")}</div>`;
    main.innerHTML = `<h1>Queues</h1>${(children[""] || []).map(cohort).join("")}${(cqsOf[""] || []).map(cq).join("") || ""}`
      + (d.clusterQueues.length ? "" : "<p>No ClusterQueues.</p>");
  }

  // ------------------------------------------------------------------ Workloads
  function renderWorkloads(d) {
    const pend = d.pending.map((w) => `<tr data-workload="${esc(w.key)}" data-position="${w.position}">
      <td class="num">${w.position} / ${w.of}</td><td><b>${esc(w.key)}</b></td><td>${esc(w.localQueue)}</td><td>${esc(fmt(w.clusterQueue))}</td>
      <td class="num">${w.priority}</td><td class="num">${w.pods}</td><td><span class="badge">${esc(fmt(w.reason))}</span>${w.why ? ` <span class="badge kind">${esc(w.why.kind)}</span>` : ""}</td>
      <td class="msg">${esc(w.message || "")}</td></tr>`).join("");
    const adm = d.admitted.map((w) => {
      const plan = w.pods.map((p) => `<div class="pod"><b>${esc(p.podSet)}-${p.index}</b> → ${esc(p.node)}: ${p.devices.map((x) => `<code>${esc(x.device.split("/").slice(1).join("/"))}</code>`).join(" ")}</div>`).join("");
      const usage = Object.entries(w.usage).map(([k, v]) => `${esc(k)}=${esc(v)}`).join(", ");
      return `<tr data-workload="${esc(w.key)}"><td><span class="swatch" style="background:${colour(w.colour)}"></span><b>${esc(w.key)}</b></td><td>${esc(w.clusterQueue)}</td><td>${esc(w.localQueue)}</td>
        <td>${w.evicting ? `<span class="badge warn">evicting: ${esc(w.evicting)}</span>` : "admitted"}</td><td>${esc(when(w.admittedAt))}</td><td class="msg">${usage}</td><td>${plan}</td></tr>`;
    }).join("");
    main.innerHTML = `<h1>Workloads</h1>
      <h2>Pending (${d.pendingTotal}), in admission order per ClusterQueue</h2>
      <table class="list" id="pending"><thead><tr><th>position</th><th>workload</th><th>LocalQueue</th><th>ClusterQueue</th><th>priority</th><th>pods</th><th>reason</th><th>message</th></tr></thead><tbody>${pend}</tbody></table>
      ${d.invalid.length ? `<h2>Invalid (${d.invalid.length}): not in any queue</h2><table class="list" id="invalid"><tbody>${d.invalid.map((w) => `<tr data-workload="${esc(w.key)}"><td><b>${esc(w.key)}</b></td><td class="msg">${esc(w.message)}</td></tr>`).join("")}</tbody></table>` : ""}
      <h2>Admitted (${d.admitted.length})</h2>
      <table class="list" id="admitted"><thead><tr><th>workload</th><th>ClusterQueue</th><th>LocalQueue</th><th>state</th><th>admitted</th><th>usage</th><th>plan</th></tr></thead><tbody>${adm}</tbody></table>`;
  }

  // ------------------------------------------------------------------ Device map
  function holderColour(h) {
    if (h.state === "claim") return "hsl(0,0%,45%)";
    return colour(state.colorBy === "queue" && h.queueColour != null ? h.queueColour : h.colour);
  }

  function byCardOf(d) {
    const byCard = new Map();
    for (const item of d.held) {
      const c = item[0];
      if (!byCard.has(c)) byCard.set(c, []);
      byCard.get(c).push(item);
    }
    return byCard;
  }

  // per holder, what its devices carry (escaped once per render)
  function holderViews(d) {
    return d.holders.map((H) => ({ key: esc(H.key), queue: esc(H.clusterQueue || ""), state: H.state, bg: holderColour(H) }));
  }

  // one card: [class suffix, attributes, inner html, signature]. A device spanning the whole card (a
  // whole GPU) colours the card itself; smaller ones (MIG instances) are drawn inside it at their start
  function cardView(hv, c, items) {
    const n = state.cardCells[c], pool = state.cardPool[c];
    if (!items || !items.length) return ["", "", "", ""];
    if (items.length === 1 && items[0][1] === 0 && items[0][2] === n) {
      const [, , , h, name] = items[0];
      const v = hv[h];
      const attrs = ` data-device="${esc(pool)}/${esc(name)}" data-holder="${v.key}" data-state="${v.state}" style="--n:${n};background-color:${v.bg}"`;
      return [` held ${v.state}`, attrs, "", `W${name}|${v.key}|${v.state}|${v.bg}`];
    }
    let html = "", sig = "";
    for (const [, start, size, h, name] of items) {
      const v = hv[h];
      sig += `|${start},${size},${name},${v.key},${v.state},${v.bg}`;
      html += `<div class="inst ${v.state}" data-device="${esc(pool)}/${esc(name)}" data-holder="${v.key}" data-state="${v.state}" data-start="${start}" data-size="${size}" style="left:${100 * start / n}%;width:${100 * size / n}%;background-color:${v.bg}"></div>`;
    }
    return ["", ` style="--n:${n}"`, html, sig];
  }

  function renderDevices(d) {
    const L = d.layout;
    const byCard = byCardOf(d);
    if (state.layoutId !== L.id) {
      // a new layout: the whole map in one string, the held devices included
      state.layoutId = L.id;
      state.cardPool = new Array(L.cards);
      state.cardCells = new Array(L.cards);
      state.cardBase = new Array(L.cards);
      state.sig = new Map();
      const hv = holderViews(d);
      const parts = [`<h1>Device map</h1><div class="tools">colour by <select id="colorBy"><option value="workload">workload</option><option value="queue">ClusterQueue</option></select>
        <input id="filter" placeholder="filter nodes" size="16"> <span id="legend"></span></div><div id="map">`];
      for (const [node, cards] of L.nodes) {
        parts.push(`<div class="node" data-node="${esc(node)}"><div class="nname">${esc(node)}</div><div class="cards">`);
        for (const [idx, label, n, tainted, pool, whole] of cards) {
          const key = whole ? `${L.pools[pool]}/${label}` : "";
          state.cardPool[idx] = L.pools[pool];
          state.cardCells[idx] = n;
          const base = `card${n > 1 ? " part" : ""}${tainted ? " tainted" : ""}`;
          state.cardBase[idx] = base;
          const [cls, attrs, inner, sig] = cardView(hv, idx, byCard.get(idx));
          if (sig) state.sig.set(idx, sig);
          parts.push(`<div class="${base}${cls}" data-card="${idx}" data-label="${esc(label)}" data-key="${esc(key)}" title="${esc(label)}"${attrs || ` style="--n:${n}"`}>${inner}</div>`);
        }
        parts.push("</div></div>");
      }
      parts.push("</div>");
      main.innerHTML = parts.join("");
      state.cards = new Array(L.cards);
      for (const el of main.querySelectorAll(".card")) state.cards[+el.dataset.card] = el;
      const sel = document.getElementById("colorBy");
      sel.value = state.colorBy;
      sel.onchange = () => { state.colorBy = sel.value; state.sig = new Map([...state.sig.keys()].map((k) => [k, "?"])); paint(state.data, byCardOf(state.data)); };
      const f = document.getElementById("filter");
      f.value = state.filter;
      f.oninput = () => { state.filter = f.value; applyFilter(); };
      document.getElementById("map").onclick = onMapClick;
      applyFilter();
      legend(d);
    } else {
      paint(d, byCard);
    }
  }

  function paint(d, byCard) {
    const cards = state.cards;
    const hv = holderViews(d);
    for (const c of new Set([...state.sig.keys(), ...byCard.keys()])) {
      const el = cards[c];
      if (!el) continue;
      const [cls, , inner, sig] = cardView(hv, c, byCard.get(c));
      if ((state.sig.get(c) || "") === sig) continue;
      el.className = state.cardBase[c] + cls;
      el.innerHTML = inner;
      const whole = cls !== "";
      const first = whole ? byCard.get(c)[0] : null;
      if (whole) {
        el.dataset.device = `${state.cardPool[c]}/${first[4]}`;
        el.dataset.holder = d.holders[first[3]].key;
        el.dataset.state = d.holders[first[3]].state;
        el.style.backgroundColor = hv[first[3]].bg;
      } else {
        delete el.dataset.device; delete el.dataset.holder; delete el.dataset.state;
        el.style.backgroundColor = "";
      }
      if (sig) state.sig.set(c, sig); else state.sig.delete(c);
    }
    legend(d);
  }

  function legend(d) {
    const seen = new Map();
    for (const h of d.holders) {
      const k = state.colorBy === "queue" ? (h.clusterQueue || h.key) : h.key;
      if (!seen.has(k)) seen.set(k, h);
    }
    const legend = [...seen.entries()].slice(0, 40).map(([k, h]) => `<span class="leg" data-legend="${esc(k)}"><span class="swatch" style="background:${holderColour(h)}"></span>${esc(k)}</span>`).join("");
    const more = seen.size > 40 ? ` … ${seen.size - 40} more` : "";
    document.getElementById("legend").innerHTML = `${legend}${more} <span class="leg"><span class="swatch free"></span>free</span> <span class="leg"><span class="swatch evicting"></span>evicting</span> <span class="leg"><span class="swatch tainted"></span>tainted</span>`;
  }

  function applyFilter() {
    const f = state.filter.trim();
    for (const n of main.querySelectorAll(".node")) n.hidden = f !== "" && !n.dataset.node.includes(f);
  }

  async function onMapClick(ev) {
    const inst = ev.target.closest(".inst");
    const card = ev.target.closest(".card");
    const id = inst ? inst.dataset.device : (card ? (card.dataset.device || card.dataset.key) : "");
    if (!id) return;
    const r = await fetch(`/api/device?${query({ id })}`, { cache: "no-store" });
    if (!r.ok) { showDetail(`<p class="error">${esc(await r.text())}</p>`); return; }
    const x = await r.json();
    const kv = (o) => Object.entries(o || {}).map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(typeof v === "object" ? JSON.stringify(v) : v)}</td></tr>`).join("");
    const holder = x.holder ? `<table>${kv({ workload: x.holder.key, clusterQueue: x.holder.clusterQueue, localQueue: x.holder.localQueue, state: x.holder.state, claim: x.holder.claim, pod: x.holder.pod })}</table>` : "<p>free</p>";
    const same = x.onCard.length > 1 ? `<h4>devices of this card</h4><table id="oncard">${x.onCard.map((o) => `<tr data-state="${o.state}"><td>${esc(o.name)}</td><td>slices ${o.start}–${o.start + o.size - 1}</td><td>${o.state === "held" ? esc(o.holder) : o.state}</td></tr>`).join("")}</table>` : "";
    showDetail(`<button id="close" type="button">×</button><h3 data-detail="${esc(x.device)}">${esc(x.name)}</h3>
      <p>node <b>${esc(x.node)}</b> · pool ${esc(x.pool)} · driver ${esc(x.driver)} · slice ${esc(x.slice)}</p>
      <p>card ${esc(x.card)}: memory slices ${x.start}–${x.start + x.size - 1} of ${x.slices}</p>
      <h4>holder</h4>${holder}<h4>attributes</h4><table>${kv(x.attributes)}</table><h4>capacity</h4><table>${kv(x.capacity)}</table>
      ${x.taints ? `<h4>taints</h4><pre>${esc(JSON.stringify(x.taints, null, 1))}</pre>` : ""}
      ${x.consumesCounters ? `<h4>consumes counters</h4><pre>${esc(JSON.stringify(x.consumesCounters, null, 1))}</pre>` : ""}${same}`);
  }

  function showDetail(html) {
    detail.innerHTML = html;
    detail.hidden = false;
    const c = document.getElementById("close");
    if (c) c.onclick = () => { detail.hidden = true; };
  }

  // ------------------------------------------------------------------ History
  function chart(points) {
    if (!points.length) return "<p>No usage recorded yet.</p>";
    const W = 900, H = 180, P = 30;
    const t0 = points[0][0], t1 = Math.max(points[points.length - 1][0], t0 + 1e-9);
    const top = Math.max(1, ...points.map((p) => Math.max(p[1], p[2] || 0)));
    const x = (t) => P + (W - 2 * P) * (t - t0) / (t1 - t0);
    const y = (v) => H - P + -(H - 2 * P) * v / top;
    let dpath = `M${x(points[0][0])},${y(0)}`;
    for (const p of points) dpath += `V${y(p[1])}H${x(p[0])}`;
    const total = points[0][2] ? `<line x1="${P}" x2="${W - P}" y1="${y(points[0][2])}" y2="${y(points[0][2])}" class="total"/><text x="${W - P}" y="${y(points[0][2]) - 4}" text-anchor="end">${points[0][2]} devices</text>` : "";
    return `<svg id="utilisation" viewBox="0 0 ${W} ${H}" width="100%" role="img" aria-label="devices in use over time">
      <path d="${dpath}" class="busy"/>${total}<text x="${P}" y="${H - 8}">${esc(when(t0))}</text><text x="${W - P}" y="${H - 8}" text-anchor="end">${esc(when(t1))}</text>
      <text x="4" y="${P}">${top}</text></svg>`;
  }

  function renderHistory(d) {
    const events = d.events.map((e) => `<tr data-event="${esc(e.event)}"><td>${esc(when(e.time))}</td><td><span class="badge ${e.event === "Evicted" ? "warn" : ""}">${esc(e.event)}</span></td><td>${esc(e.workload)}</td><td>${esc(fmt(e.clusterQueue))}</td><td class="msg">${esc(e.detail)}</td></tr>`).join("");
    const reports = d.reports.map((r) => `<h3>${esc(r.title)}</h3>${r.error ? `<p class="error">${esc(r.error)}</p>` : ""}
      <table class="list" data-report="${esc(r.name)}"><thead><tr>${r.columns.map((c) => `<th>${esc(c)}</th>`).join("")}</tr></thead>
      <tbody>${r.rows.map((row) => `<tr>${row.map((v) => `<td>${esc(fmt(v))}</td>`).join("")}</tr>`).join("") || `<tr><td colspan="${r.columns.length || 1}">no rows</td></tr>`}</tbody></table>`).join("");
    main.innerHTML = `<h1>History</h1>${d.error ? `<p class="error">${esc(d.error)}</p>` : ""}<h2>Devices in use</h2>${chart(d.utilisation)}
      <h2>Latest admissions and evictions</h2><table class="list" id="events"><thead><tr><th>time</th><th>event</th><th>workload</th><th>ClusterQueue</th><th>detail</th></tr></thead><tbody>${events}</tbody></table>
      <h2>Reports</h2>${reports}`;
  }

  // ------------------------------------------------------------------ replay slider
  async function setupReplay() {
    const r = await fetch("/api/timeline");
    const tl = await r.json();
    const slider = document.getElementById("slider");
    const out = document.getElementById("t");
    const [a, b] = tl.range;
    const times = tl.times;
    slider.min = a; slider.max = b;
    const p = new URLSearchParams(location.search);
    state.t = p.has("t") ? parseFloat(p.get("t")) : b;
    slider.value = state.t;
    out.textContent = state.t;
    const go = (t) => {
      state.t = t; slider.value = t; out.textContent = t;
      const u = new URL(location.href); u.searchParams.set("t", t); history.replaceState(null, "", u);
      for (const a2 of document.querySelectorAll("nav a")) a2.href = `/${a2.dataset.nav}?t=${t}`;
      poll();
    };
    slider.oninput = () => go(parseFloat(slider.value));
    document.getElementById("prev").onclick = () => { const e = times.filter((x) => x < state.t); go(e.length ? e[e.length - 1] : a); };
    document.getElementById("next").onclick = () => { const e = times.find((x) => x > state.t); go(e != null ? e : b); };
    go(state.t);
  }

  if (replay) setupReplay(); else loop();
})();
