#!/bin/bash
# The image's HEALTHCHECK: 0 when sluiced's /readyz answers 200 (ready, or degraded: Redis
# unreachable and each limit answering by its failure mode), 1 otherwise. The image has no
# curl: bash's /dev/tcp speaks the one request. Reads the HTTP listener from
# SLUICED_HTTP_LISTEN, as sluiced does; an address of every interface is asked on loopback.
set -u
listen=${SLUICED_HTTP_LISTEN:-127.0.0.1:8080}
host=${listen%:*}
port=${listen##*:}
case $host in
  0.0.0.0 | "" | localhost) host=127.0.0.1 ;;
  "[::]" | "[::1]") host=::1 ;;
esac
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET /readyz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$host" >&3
read -r -t 2 _ code _ <&3 || exit 1
[ "$code" = 200 ]
