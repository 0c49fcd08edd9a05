/* Keyboard work on a list (the approvals inbox, a queue), as in a mail client:
   j / k select the next / previous row, Enter opens it, x ticks its box.
   Progressive: the page works without it. Served from /static (the CSP allows no inline
   script). A list opts in with data-keys on its table; a row opens its a[data-open]. */
(function () {
  "use strict";

  var table = document.querySelector("table[data-keys]");
  if (!table) {
    return;
  }
  var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr"));
  var current = -1;

  function typing(target) {
    if (!target || !target.closest) {
      return false;
    }
    if (target.isContentEditable || target.closest("textarea, select")) {
      return true;
    }
    var input = target.closest("input");
    return Boolean(input) && input.type !== "checkbox" && input.type !== "radio";
  }

  function select(index) {
    if (!rows.length) {
      return;
    }
    index = Math.max(0, Math.min(rows.length - 1, index));
    if (current >= 0) {
      rows[current].classList.remove("selected");
      rows[current].setAttribute("aria-selected", "false");
    }
    current = index;
    var row = rows[current];
    row.classList.add("selected");
    row.setAttribute("aria-selected", "true");
    row.scrollIntoView({ block: "nearest" });
  }

  function open() {
    var link = current >= 0 ? rows[current].querySelector("a[data-open]") : null;
    if (link) {
      window.location.assign(link.href);
    }
  }

  function tick() {
    var box = current >= 0 ? rows[current].querySelector("input[type=checkbox]") : null;
    if (box) {
      box.click();
    }
  }

  rows.forEach(function (row, index) {
    row.setAttribute("aria-selected", "false");
    row.addEventListener("click", function () {
      select(index);
    });
  });

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) {
      return;
    }
    if (typing(event.target)) {
      return;
    }
    var onControl = event.target.closest && event.target.closest("a, button, summary");
    if (event.key === "j") {
      select(current + 1);
    } else if (event.key === "k") {
      select(current < 0 ? 0 : current - 1);
    } else if (event.key === "Enter" && current >= 0 && !onControl) {
      open();
    } else if (event.key === "x" && current >= 0) {
      tick();
    } else {
      return;
    }
    event.preventDefault();
  });
})();
