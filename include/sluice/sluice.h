// sluice/sluice.h — everything of the public API but the Asio adapter (sluice/asio.h).
#pragma once

#include "sluice/admin.h"
#include "sluice/client.h"
#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/lease.h"
#include "sluice/limits.h"
#include "sluice/metrics.h"
#include "sluice/quota.h"
#include "sluice/status.h"
