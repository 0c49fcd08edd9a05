/* The correction form (runs/_correction_fields.html): choosing another request type or effect
   shows its fields at once, as its "Show the fields of this type" button does.
   Progressive: the page works without it. Served from /static (the CSP allows no inline
   script). */
(function () {
  "use strict";

  var form = document.querySelector("form[data-correction]");
  if (!form) {
    return;
  }
  var show = form.querySelector("[data-show-fields]");
  if (!show) {
    return;
  }
  ["category", "requested_effect"].forEach(function (name) {
    var select = form.elements.namedItem(name);
    if (!select) {
      return;
    }
    select.addEventListener("change", function () {
      if (typeof form.requestSubmit === "function") {
        form.requestSubmit(show);
      } else {
        show.click();
      }
    });
  });
  // Tests (and anyone scripting the page) know the choices now reload the fields.
  form.setAttribute("data-ready", "");
})();
