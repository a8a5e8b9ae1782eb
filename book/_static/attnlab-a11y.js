/* attnlab book: accessibility of markup that the book's pages get from packages.

   The self-check quizzes (jupyterquiz) draw each multiple-choice question as a group of
   radio buttons inside labels, with the question in a plain <div> before them and the
   feedback in another: the group had no name and no group role, and the feedback ("Right.",
   "No: ...") appeared without being announced. Here each answer group becomes a
   role="radiogroup" named by its question, and the feedback a polite live region.
   The quizzes are drawn by their own script after the page loads, so new ones are
   patched as they appear (MutationObserver). */
(function () {
  "use strict";

  function patchQuiz(root) {
    root.querySelectorAll(".Quiz .Answer").forEach(function (answers) {
      if (answers.getAttribute("role") === "radiogroup") return;
      var question = answers.previousElementSibling;
      while (question && !(question.id || "").startsWith("quizQn")) question = question.previousElementSibling;
      if (!question) question = answers.parentElement.querySelector("[id^='quizQn']");
      if (answers.querySelector("input[type='radio']")) answers.setAttribute("role", "radiogroup");
      else answers.setAttribute("role", "group");
      if (question && question.id) answers.setAttribute("aria-labelledby", question.id);
    });
    root.querySelectorAll(".Quiz .Feedback").forEach(function (fb) {
      fb.setAttribute("role", "status");
      fb.setAttribute("aria-live", "polite");
    });
  }

  /* The theme's primary sidebar is a <dialog>, not a landmark: its first item (the book's
     title, linking home) was "content outside landmarks". It is the book's navigation. */
  function patchSidebar() {
    var items = document.querySelector(".bd-sidebar-primary .sidebar-primary-items__start");
    if (items && !items.getAttribute("role")) {
      items.setAttribute("role", "navigation");
      items.setAttribute("aria-label", "Book");
    }
  }

  /* <main role="main">: the role repeats the element's own (axe-core: aria-allowed-role). */
  function patchMain() {
    var main = document.querySelector("main[role='main']");
    if (main) main.removeAttribute("role");
  }

  function start() {
    patchSidebar();
    patchMain();
    patchQuiz(document);
    new MutationObserver(function (records) {
      for (var i = 0; i < records.length; i++) {
        if (records[i].addedNodes.length) { patchQuiz(document); return; }
      }
    }).observe(document.body, { childList: true, subtree: true });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
