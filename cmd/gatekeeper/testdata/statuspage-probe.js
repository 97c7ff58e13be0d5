// The status page's probe: TestStatusPageInChromium serves it beside app.js
// (it is never shipped) to measure what only a browser knows. It records the
// "Level changes" list as the page's first render leaves it, and after seven
// seconds of the page's life finds every piece of text that runs out of the
// box holding it (a card, a signal's block, a table cell) or off the page.
// Its findings go into <pre id="probe" hidden> as JSON, which --dump-dom
// returns. Like the page, it writes nothing to the console.
'use strict';

(() => {
  const found = { firstEvents: null, overflow: [] };

  // The page sets #updated in every render, before it lists the changes in
  // the same task; the observer runs once that task is done.
  const updated = document.getElementById('updated');
  const first = new MutationObserver(() => {
    first.disconnect();
    found.firstEvents = [...document.querySelectorAll('#events li')].map((li) => li.textContent);
  });
  first.observe(updated, { childList: true, characterData: true, subtree: true });

  function name(box) {
    return box.tagName.toLowerCase() + (box.className ? '.' + box.className.replace(/ /g, '.') : '') +
      (box.dataset.upstream ? '[' + box.dataset.upstream + ']' : '') + (box.dataset.signal ? '[' + box.dataset.signal + ']' : '');
  }

  function measure() {
    const page = document.documentElement.clientWidth;
    for (const box of document.querySelectorAll('.panel, .signal, td, th')) {
      const r = box.getBoundingClientRect();
      if (r.right > page + 0.5) found.overflow.push(`${name(box)} ends at ${r.right}px, past the page's ${page}px`);
      const walk = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        if (!n.textContent.trim()) continue;
        const range = document.createRange();
        range.selectNodeContents(n);
        for (const t of range.getClientRects()) {
          if (t.left < r.left - 0.5 || t.right > r.right + 0.5) {
            found.overflow.push(`${name(box)} [${r.left}, ${r.right}] holds text at [${t.left}, ${t.right}]: ${n.textContent.slice(0, 80)}`);
          }
        }
      }
    }
    const out = document.createElement('pre');
    out.id = 'probe';
    out.hidden = true;
    out.textContent = JSON.stringify(found);
    document.body.append(out);
  }
  setTimeout(measure, 7000);
})();
