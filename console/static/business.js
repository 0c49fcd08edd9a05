/* The business form (policy/business.html): "Add another request type / route / effect /
   customer attribute / risk signal" adds one more empty block at once, as the button does
   with a round trip, and a route or effect added in the form can be chosen in the request
   types' selects by what is typed into it.
   Progressive: the page works without it. Served from /static (the CSP allows no inline
   script). */
(function () {
  "use strict";

  var form = document.querySelector("form[data-business]");
  if (!form) {
    return;
  }
  var MAX_SHOWN = 30; // as console/forms/business.py
  // The selects of the request types that can name a route or an effect added in the form.
  var CHOOSING = { route: 'select[name$="-route"]', effect: 'select[name$="-effect"]' };
  var ADDED = /^new_(route|effect)(\d*)-(name|label)$/;

  function prefix(kind, number) {
    return number === 1 ? "new_" + kind : "new_" + kind + number;
  }

  function choice(number) {
    return number === 1 ? "+new" : "+new" + number;
  }

  function cleared(element) {
    if (element.type === "checkbox") {
      element.checked = false;
      element.removeAttribute("checked");
    } else if (element.tagName === "SELECT") {
      Array.prototype.forEach.call(element.options, function (option) {
        option.removeAttribute("selected");
      });
      element.selectedIndex = 0;
    } else {
      element.value = "";
      element.textContent = element.tagName === "TEXTAREA" ? "" : element.textContent;
      element.removeAttribute("value");
    }
    element.removeAttribute("autofocus");
  }

  function renamed(block, from, to) {
    block.querySelectorAll("[name], [id], [for], [aria-describedby]").forEach(function (el) {
      ["name", "id", "for", "aria-describedby"].forEach(function (attribute) {
        var value = el.getAttribute(attribute);
        if (value) {
          el.setAttribute(attribute, value.split(from + "-").join(to + "-"));
        }
      });
    });
  }

  // The words a route or effect added in block `number` is chosen by (as the server says).
  function words(kind, number) {
    var name = form.elements.namedItem(prefix(kind, number) + "-name");
    var label = form.elements.namedItem(prefix(kind, number) + "-label");
    var typed = ((label && label.value) || (name && name.value) || "").trim();
    return typed
      ? typed + " (the new " + kind + ", added below)"
      : "New " + kind + " " + number + ", added below";
  }

  function offer(kind, number) {
    form.querySelectorAll(CHOOSING[kind]).forEach(function (select) {
      var found = select.querySelector('option[value="' + choice(number) + '"]');
      if (!found) {
        found = document.createElement("option");
        found.value = choice(number);
        select.appendChild(found);
      }
      found.textContent = words(kind, number);
    });
  }

  function add(kind) {
    var shown = form.querySelector('input[data-shown="' + kind + '"]');
    var blocks = form.querySelectorAll('[data-add-block="' + kind + '"]');
    var number = parseInt(shown.value, 10) + 1;
    if (!blocks.length || number > MAX_SHOWN) {
      return false;
    }
    var block = blocks[0].cloneNode(true);
    renamed(block, prefix(kind, 1), prefix(kind, number));
    block.setAttribute("data-testid", "add-" + kind + "-" + number);
    block.querySelectorAll("input, textarea, select").forEach(cleared);
    block.querySelectorAll('[data-testid="field-error"]').forEach(function (error) {
      error.remove();
    });
    block.querySelectorAll(".invalid").forEach(function (field) {
      field.classList.remove("invalid");
    });
    blocks[blocks.length - 1].after(block);
    shown.value = String(number);
    if (CHOOSING[kind]) {
      for (var earlier = 1; earlier <= number; earlier += 1) {
        offer(kind, earlier);
      }
    }
    var first = block.querySelector("input, textarea, select");
    if (first) {
      first.focus();
    }
    return true;
  }

  form.querySelectorAll('button[name="add"]').forEach(function (button) {
    button.addEventListener("click", function (event) {
      if (add(button.value)) {
        event.preventDefault();
      }
    });
  });
  form.addEventListener("input", function (event) {
    var found = ADDED.exec(event.target.name || "");
    var shown = found && form.querySelector('input[data-shown="' + found[1] + '"]');
    // With one block the choice says "The new route, added below": that one, whatever its name.
    if (shown && parseInt(shown.value, 10) > 1) {
      offer(found[1], found[2] ? parseInt(found[2], 10) : 1);
    }
  });
  // Tests (and anyone scripting the page) know the buttons now add blocks in place.
  form.setAttribute("data-ready", "");
})();
