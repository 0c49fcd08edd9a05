"""The customer list: searched by whoever reads runs; added to, changed and loaded from a
file by whoever may change customers (automation.change_customer: the ops leads)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from automation.intake.customers import (
    CustomerFileInvalid,
    CustomerInvalid,
    CustomerRules,
    customer_add,
    customer_change,
    customers_upload,
)
from automation.intake.models import Customer
from automation.intake.selectors import customers_search
from console.forms.customers import CustomerFileForm, CustomerForm
from core.http import AuthenticatedHttpRequest

CHANGE = "automation.change_customer"
SEARCH_LIMIT = 200


@require_GET
@login_required
@permission_required("automation.view_customer", raise_exception=True)
def customer_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    text = request.GET.get("q", "")[:SEARCH_LIMIT]
    after = request.GET.get("after", "")[:SEARCH_LIMIT]
    rows, next_after = customers_search(text=text, after=after)
    context = {
        "customers": rows,
        "q": text,
        "next_after": next_after,
        "paged": bool(after),
        "upload": CustomerFileForm() if request.user.has_perm(CHANGE) else None,
    }
    return render(request, "customers/list.html", context)


def _form(request: AuthenticatedHttpRequest, customer: Customer | None = None) -> CustomerForm:
    rules = CustomerRules.active()
    data = request.POST if request.method == "POST" else None
    return CustomerForm(data, tiers=rules.tiers, pattern=rules.pattern.pattern, customer=customer)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(CHANGE, raise_exception=True)
def customer_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = _form(request)
    if form.is_bound and form.is_valid():
        try:
            customer = customer_add(
                user=request.user,
                reference=form.cleaned_data["reference"],
                name=form.cleaned_data["name"],
                account_tier=form.cleaned_data["account_tier"],
                email_domains=form.domains(),
            )
        except CustomerInvalid as exc:
            form.refused(exc)
        else:
            messages.success(request, f"Added {customer.reference} {customer.name}.")
            return redirect("customers:list")
    status = 400 if form.is_bound else 200
    return render(request, "customers/edit.html", {"form": form}, status=status)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(CHANGE, raise_exception=True)
def customer_edit(request: AuthenticatedHttpRequest, customer_id: int) -> HttpResponse:
    customer = get_object_or_404(Customer, pk=customer_id)
    form = _form(request, customer)
    if form.is_bound and form.is_valid():
        try:
            customer = customer_change(
                user=request.user,
                customer_id=customer.pk,
                name=form.cleaned_data["name"],
                account_tier=form.cleaned_data["account_tier"],
                email_domains=form.domains(),
            )
        except CustomerInvalid as exc:
            form.refused(exc)
        else:
            messages.success(request, f"Saved {customer.reference} {customer.name}.")
            return redirect("customers:list")
    context = {"form": form, "customer": customer}
    return render(request, "customers/edit.html", context, status=400 if form.errors else 200)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(CHANGE, raise_exception=True)
def customer_upload(request: AuthenticatedHttpRequest) -> HttpResponse:
    """GET: the upload form. POST: the file loaded whole, or every wrong line named and
    nothing loaded."""
    form = CustomerFileForm(request.POST or None, request.FILES or None)
    problems: CustomerFileInvalid | None = None
    if form.is_bound and form.is_valid():
        name = form.file_name
        try:
            created, updated = customers_upload(
                user=request.user,
                content=form.cleaned_data["file"],
                source=f"upload:{name}",
            )
        except CustomerFileInvalid as exc:
            problems = exc
        else:
            messages.success(
                request, f"Loaded {name}: {created} customers added, {updated} updated."
            )
            return redirect("customers:list")
    status = 400 if form.is_bound else 200
    context = {"form": form, "problems": problems}
    return render(request, "customers/upload.html", context, status=status)
