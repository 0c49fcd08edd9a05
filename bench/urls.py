"""The product's URLs, plus one bare view that does a single INSERT: the reference the
intake API is compared with on the same server setup."""

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from config.urls import urlpatterns as product_urls


@csrf_exempt
def bare_insert(request: HttpRequest) -> HttpResponse:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_bare (body) VALUES (%s)", [request.body])
    return HttpResponse(status=202)


urlpatterns = [*product_urls, path("bench/bare", bare_insert)]
